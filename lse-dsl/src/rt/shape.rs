//! Checks of declared buffer lengths at launch (`x: &[f32; rows * d]`, `LOOM.md`,
//! "Parameters"): the length a kernel may touch, evaluated from the launch's scalars, against
//! the buffer handed in. A GPU has no bounds checks, so this is the check that keeps a kernel
//! inside its buffers whatever the caller passes.

use std::fmt;

/// A declared length with one launch's scalar values in place, built by a kernel's generated
/// `Launch::check_lengths` (operands are borrowed, so a check allocates nothing).
#[derive(Clone, Copy, Debug)]
pub enum Len<'a> {
    Lit(u64),
    /// A `u32` scalar parameter or a workgroup count of the grid (`num_groups_y()`): its
    /// name and this launch's value.
    Scalar(&'static str, u32),
    Add(&'a Len<'a>, &'a Len<'a>),
    Sub(&'a Len<'a>, &'a Len<'a>),
    Mul(&'a Len<'a>, &'a Len<'a>),
    /// Truncating division.
    Div(&'a Len<'a>, &'a Len<'a>),
    Min(&'a Len<'a>, &'a Len<'a>),
    Max(&'a Len<'a>, &'a Len<'a>),
}

/// Why a declared length has no value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LenFault {
    /// A sum or product above `u64::MAX`.
    Overflow,
    /// A difference below zero.
    Negative,
    DivisionByZero,
}

impl Len<'_> {
    /// The value in `u64` with checked arithmetic: no step wraps.
    pub fn eval(&self) -> Result<u64, LenFault> {
        let two = |a: &Len, b: &Len| Ok::<_, LenFault>((a.eval()?, b.eval()?));
        match self {
            Len::Lit(v) => Ok(*v),
            Len::Scalar(_, v) => Ok(u64::from(*v)),
            Len::Add(a, b) => {
                let (a, b) = two(a, b)?;
                a.checked_add(b).ok_or(LenFault::Overflow)
            }
            Len::Sub(a, b) => {
                let (a, b) = two(a, b)?;
                a.checked_sub(b).ok_or(LenFault::Negative)
            }
            Len::Mul(a, b) => {
                let (a, b) = two(a, b)?;
                a.checked_mul(b).ok_or(LenFault::Overflow)
            }
            Len::Div(a, b) => {
                let (a, b) = two(a, b)?;
                a.checked_div(b).ok_or(LenFault::DivisionByZero)
            }
            Len::Min(a, b) => two(a, b).map(|(a, b)| a.min(b)),
            Len::Max(a, b) => two(a, b).map(|(a, b)| a.max(b)),
        }
    }

    /// Each scalar the expression reads, once, in first-use order.
    fn scalars(&self, out: &mut Vec<(&'static str, u32)>) {
        match self {
            Len::Lit(_) => {}
            Len::Scalar(name, v) => {
                if !out.iter().any(|(n, _)| n == name) {
                    out.push((name, *v));
                }
            }
            Len::Add(a, b)
            | Len::Sub(a, b)
            | Len::Mul(a, b)
            | Len::Div(a, b)
            | Len::Min(a, b)
            | Len::Max(a, b) => {
                a.scalars(out);
                b.scalars(out);
            }
        }
    }
}

/// A buffer argument that does not meet its parameter's declared length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShapeError {
    /// The buffer parameter.
    pub param: &'static str,
    /// The declared length as written in canonical form, e.g. `rows * d`.
    pub declared: &'static str,
    /// The scalars and grid counts the length reads and their values in this launch, e.g.
    /// `rows = 3, d = 8` or `num_groups() = 4`.
    pub scalars: String,
    /// The buffer's length in elements.
    pub len: usize,
    pub problem: ShapeProblem,
}

/// What is wrong with a buffer argument's length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShapeProblem {
    /// The buffer holds fewer elements than the declared length, `need`.
    TooShort { need: u64 },
    /// The declared length has no value for these scalars.
    NoValue(LenFault),
}

impl fmt::Display for ShapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (param, declared, scalars) = (self.param, self.declared, &self.scalars);
        match self.problem {
            ShapeProblem::TooShort { need } => write!(
                f,
                "buffer `{param}` holds {} elements, fewer than its declared length \
                 `{declared}` = {need} ({scalars})",
                self.len
            ),
            ShapeProblem::NoValue(fault) => {
                let what = match fault {
                    LenFault::Overflow => "overflows u64",
                    LenFault::Negative => "goes below zero",
                    LenFault::DivisionByZero => "divides by zero",
                };
                write!(
                    f,
                    "the declared length `{declared}` of buffer `{param}` {what} ({scalars})"
                )
            }
        }
    }
}

impl std::error::Error for ShapeError {}

/// Checks that buffer `param`, holding `len` elements, holds at least `need` (its declared
/// length `declared` with this launch's scalars in place).
pub fn check_length(
    param: &'static str,
    declared: &'static str,
    len: usize,
    need: &Len<'_>,
) -> Result<(), ShapeError> {
    let problem = match need.eval() {
        Ok(need) if u64::try_from(len).map_or(true, |l| l >= need) => return Ok(()),
        Ok(need) => ShapeProblem::TooShort { need },
        Err(fault) => ShapeProblem::NoValue(fault),
    };
    let mut scalars = Vec::new();
    need.scalars(&mut scalars);
    let scalars = scalars
        .iter()
        .map(|(n, v)| format!("{n} = {v}"))
        .collect::<Vec<_>>()
        .join(", ");
    Err(ShapeError {
        param,
        declared,
        scalars,
        len,
        problem,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_at_least_the_declared_length_passes() {
        let need = Len::Mul(&Len::Scalar("rows", 3), &Len::Scalar("d", 4));
        assert_eq!(need.eval(), Ok(12));
        assert_eq!(check_length("x", "rows * d", 12, &need), Ok(()));
        assert_eq!(check_length("x", "rows * d", 13, &need), Ok(()));
    }

    #[test]
    fn a_short_buffer_names_the_length_its_value_and_the_scalars() {
        let rows = Len::Scalar("rows", 3);
        let need = Len::Mul(&rows, &Len::Add(&rows, &Len::Lit(1)));
        let err = check_length("x", "rows * (rows + 1)", 11, &need).unwrap_err();
        assert_eq!(err.problem, ShapeProblem::TooShort { need: 12 });
        assert_eq!(
            err.to_string(),
            "buffer `x` holds 11 elements, fewer than its declared length \
             `rows * (rows + 1)` = 12 (rows = 3)"
        );
    }

    #[test]
    fn overflow_negative_and_division_by_zero_are_errors_not_wraps() {
        let big = Len::Scalar("n", u32::MAX);
        let cube = Len::Mul(&big, &Len::Mul(&big, &big));
        assert_eq!(Len::Mul(&cube, &big).eval(), Err(LenFault::Overflow));
        assert_eq!(
            Len::Add(&Len::Lit(u64::MAX), &Len::Lit(1)).eval(),
            Err(LenFault::Overflow)
        );
        let (a, b) = (Len::Scalar("a", 2), Len::Scalar("b", 3));
        // a - b + b would be 2 with wrapping arithmetic.
        let wraps = Len::Add(&Len::Sub(&a, &b), &b);
        let err = check_length("y", "a - b + b", usize::MAX, &wraps).unwrap_err();
        assert_eq!(err.problem, ShapeProblem::NoValue(LenFault::Negative));
        assert_eq!(
            err.to_string(),
            "the declared length `a - b + b` of buffer `y` goes below zero (a = 2, b = 3)"
        );
        let zero = Len::Scalar("z", 0);
        assert_eq!(Len::Div(&a, &zero).eval(), Err(LenFault::DivisionByZero));
        assert_eq!(Len::Div(&Len::Lit(7), &a).eval(), Ok(3));
        assert_eq!(Len::Min(&a, &b).eval(), Ok(2));
        assert_eq!(Len::Max(&a, &b).eval(), Ok(3));
    }
}
