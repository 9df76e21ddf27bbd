//! The LLVM IR text emitter shared by both targets.
//!
//! One [`Emitter`] lowers statements and expressions of a LOOM kernel into the body of one
//! LLVM function. What differs between AMDGPU and the host (address spaces, where builtins
//! come from, what barriers and collectives become) is decided by the target modules
//! ([`crate::amdgpu`], [`crate::host`]), which fill in the emitter's value tables before
//! lowering and handle `Barrier`/`Collective` themselves.

mod builder;
mod combine;
mod expr;
mod stmt;
mod tiles;

pub(crate) use builder::{Builder, ModuleText};
pub(crate) use combine::{
    combine, combine_argmax, dequant_sum, dot_step, scaled_sum, tile_binary, tile_binary_x16,
};
pub(crate) use expr::convert;
pub(crate) use tiles::WindowVals;

use lse_dsl::ir::{CollectiveOp, Expr, Kernel, Stmt, Ty};

/// Where a kernel variable lives in the emitted function.
#[derive(Clone, Debug)]
pub(crate) enum VarLoc {
    /// One scalar slot (an alloca; mem2reg turns it into SSA values).
    Scalar(String),
    /// One slot per work-item (host only): element `lid` of an `[WG x T]` alloca.
    PerItem(String),
}

/// Hooks for the statements whose lowering depends on the target.
pub(crate) trait TargetStmts {
    /// Lowers `Barrier`, `Collective` or `Tile`; called by the shared statement lowering.
    fn sync_stmt(&mut self, e: &mut Emitter, s: &Stmt) -> Lowered<()>;
}

/// Lowers LOOM statements and expressions into LLVM IR text for one function.
pub(crate) struct Emitter<'k> {
    pub k: &'k Kernel,
    pub b: Builder,
    /// Pointer type of allocas (`ptr addrspace(5)` on AMDGPU, `ptr` on the host).
    pub alloca_ptr: &'static str,
    /// Pointer type of global buffers.
    pub buf_ptr: &'static str,
    /// Pointer type of shared arrays.
    pub shared_ptr: &'static str,
    /// Indexed by VarId.
    pub vars: Vec<VarLoc>,
    /// Indexed by ParamId: the buffer's base pointer value, if the parameter is a buffer.
    pub bufs: Vec<Option<String>>,
    /// Indexed by ParamId: the scalar's value, if the parameter is a scalar.
    pub scalars: Vec<Option<String>>,
    /// Indexed by SharedId: the array's base pointer value.
    pub shared: Vec<String>,
    /// Indexed by TileId, on GPUs: the tile's shared-memory address (the host lowering keeps
    /// its own).
    pub tiles: Vec<String>,
    /// The current work-item id value (`i32`).
    pub lid: String,
    pub group_id: [String; 3],
    pub num_groups: [String; 3],
    /// `(continue target, break target)` of the enclosing loops, innermost last.
    pub loops: Vec<(String, String)>,
    /// Metadata attached to memory accesses (the region's access group), or empty.
    pub mem_md: String,
}

/// The result of lowering a piece of a kernel: the first error stops the lowering, and the
/// whole kernel fails with it (the module never reaches LLVM).
pub(crate) type Lowered<T> = Result<T, String>;

impl<'k> Emitter<'k> {
    pub fn new(
        k: &'k Kernel,
        alloca_ptr: &'static str,
        buf_ptr: &'static str,
        shared_ptr: &'static str,
    ) -> Self {
        Emitter {
            k,
            b: Builder::new(),
            alloca_ptr,
            buf_ptr,
            shared_ptr,
            vars: Vec::new(),
            bufs: vec![None; k.params.len()],
            scalars: vec![None; k.params.len()],
            shared: Vec::new(),
            tiles: Vec::new(),
            lid: "0".into(),
            group_id: ["0".into(), "0".into(), "0".into()],
            num_groups: ["1".into(), "1".into(), "1".into()],
            loops: Vec::new(),
            mem_md: String::new(),
        }
    }

    /// Checks a collective's arity (`argmax` and `broadcast` take two arguments, `argmax`
    /// gives two results) and element type (f32, i32 or u32), and returns the element type.
    /// Every target lowers collectives itself and calls this first.
    pub fn check_collective(&self, op: CollectiveOp, dst: &[u32], args: &[Expr]) -> Lowered<Ty> {
        let want = if matches!(
            op,
            CollectiveOp::Argmax | CollectiveOp::Broadcast | CollectiveOp::SubgroupShuffle
        ) {
            2
        } else {
            1
        };
        let want_dst = if op == CollectiveOp::Argmax { 2 } else { 1 };
        if args.len() != want || dst.len() != want_dst {
            return Err(format!(
                "{op:?} takes {want} arguments and {want_dst} results"
            ));
        }
        let ty = args[0].ty;
        if !matches!(ty, Ty::F32 | Ty::I32 | Ty::U32) {
            return Err(format!("{op:?} on {}", ty.rust_name()));
        }
        Ok(ty)
    }

    /// An alloca of `ty` (placed in the entry block); returns its pointer value.
    pub fn alloca(&mut self, ty: &str, align: u32) -> String {
        let v = self.b.fresh();
        let as5 = if self.alloca_ptr == "ptr" {
            ""
        } else {
            ", addrspace(5)"
        };
        self.b
            .allocas
            .push_str(&format!("  {v} = alloca {ty}, align {align}{as5}\n"));
        v
    }

    /// Scalar allocas for every local (the AMDGPU layout, and the host's Private/Uniform).
    pub fn scalar_var(&mut self, ty: Ty) -> VarLoc {
        VarLoc::Scalar(self.alloca(var_lty(ty), align_of(ty)))
    }

    /// Pointer to variable `v`'s slot for the current work-item.
    fn var_ptr(&mut self, v: u32) -> Lowered<(String, Ty)> {
        let Some(local) = self.k.locals.get(v as usize) else {
            return Err(format!("variable id {v} is not declared"));
        };
        let ty = local.ty;
        match self.vars.get(v as usize).cloned() {
            Some(VarLoc::Scalar(p)) => Ok((p, ty)),
            Some(VarLoc::PerItem(a)) => {
                let lid = self.lid.clone();
                let p = self.b.op(format!(
                    "getelementptr inbounds {}, {} {a}, i32 {lid}",
                    var_lty(ty),
                    self.alloca_ptr
                ));
                Ok((p, ty))
            }
            None => Err(format!("variable `{}` has no storage", local.name)),
        }
    }

    /// Reads variable `v` for the current work-item.
    pub fn read_var(&mut self, v: u32) -> Lowered<String> {
        let (p, ty) = self.var_ptr(v)?;
        let md = self.mem_md.clone();
        let x = self.b.op(format!(
            "load {}, {} {p}, align {}{md}",
            var_lty(ty),
            self.alloca_ptr,
            align_of(ty)
        ));
        Ok(match ty {
            Ty::Bool => byte_to_bool(&mut self.b, &x),
            _ => x,
        })
    }

    /// Writes `value` to variable `v` for the current work-item.
    pub fn write_var(&mut self, v: u32, value: &str) -> Lowered<()> {
        let (p, ty) = self.var_ptr(v)?;
        let md = self.mem_md.clone();
        let value = match ty {
            Ty::Bool => bool_to_byte(&mut self.b, value),
            _ => value.to_string(),
        };
        self.b.ins(format!(
            "store {} {value}, {} {p}, align {}{md}",
            var_lty(ty),
            self.alloca_ptr,
            align_of(ty)
        ));
        Ok(())
    }

    /// Lowers a block with the given target hooks.
    pub fn block(&mut self, t: &mut dyn TargetStmts, block: &[Stmt]) -> Lowered<()> {
        for s in block {
            self.stmt(t, s)?;
        }
        Ok(())
    }
}

/// The LLVM type of a LOOM type (16-bit storage types are plain `i16`).
pub(crate) fn lty(t: Ty) -> &'static str {
    match t {
        Ty::F32 => "float",
        Ty::I32 | Ty::U32 => "i32",
        Ty::Bool => "i1",
        Ty::Bf16 | Ty::F16 | Ty::I16 => "i16",
        Ty::I8 | Ty::U8 => "i8",
    }
}

/// The type a variable of LOOM type `t` has in memory: a `bool` takes a byte, because LLVM
/// vectorises a work-item loop's loads of bytes into one vector load and a compare but loads
/// `i1` memory one lane at a time.
pub(crate) fn var_lty(t: Ty) -> &'static str {
    match t {
        Ty::Bool => "i8",
        _ => lty(t),
    }
}

/// A `bool` value as the byte it is stored as ([`var_lty`]).
pub(crate) fn bool_to_byte(b: &mut Builder, v: &str) -> String {
    b.op(format!("zext i1 {v} to i8"))
}

/// A stored byte ([`bool_to_byte`]) back to the `bool` value.
pub(crate) fn byte_to_bool(b: &mut Builder, x: &str) -> String {
    b.op(format!("icmp ne i8 {x}, 0"))
}

/// Alignment in bytes of a LOOM type in memory.
pub(crate) fn align_of(t: Ty) -> u32 {
    t.size_bytes()
}

/// A constant of type `t` whose bits are `bits`, as an LLVM operand; NaNs need an
/// instruction (a hex double cannot carry every f32 NaN payload), so this may emit one.
pub(crate) fn constant(b: &mut Builder, bits: u32, t: Ty) -> String {
    match t {
        Ty::F32 => {
            let f = f32::from_bits(bits);
            if f.is_nan() {
                b.op(format!("bitcast i32 {} to float", bits as i32))
            } else {
                format!("0x{:016X}", (f as f64).to_bits())
            }
        }
        Ty::I32 | Ty::U32 => (bits as i32).to_string(),
        Ty::Bool => if bits != 0 { "true" } else { "false" }.to_string(),
        Ty::Bf16 | Ty::F16 | Ty::I16 => (bits as u16 as i16).to_string(),
        Ty::I8 | Ty::U8 => (bits as u8 as i8).to_string(),
    }
}
