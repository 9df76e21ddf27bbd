//! Source text of a token stream for error messages, spaced the way people write Rust
//! (`local_id() < n`, not `local_id () < n`). Token streams are used instead of the source
//! file because a proc-macro on stable Rust cannot join spans to read a whole expression.

use proc_macro2::{Delimiter, Spacing, TokenStream, TokenTree};

/// Renders `ts` on one line.
pub(super) fn tokens_text(ts: &TokenStream) -> String {
    let mut out = String::new();
    let mut prev = Prev::Start;
    render(ts, &mut out, &mut prev);
    out
}

/// What the previous token was, which decides the space before the next one.
#[derive(Clone, Copy, PartialEq)]
enum Prev {
    /// Start of a group or of the text, or after a prefix-like token: no space.
    Start,
    /// An identifier, literal or closed group.
    Operand,
    /// A binary operator or comma: a space follows.
    Op,
    /// A joint punctuation (first half of `<=`, `::`...) or a unary operator: no space.
    Glued,
}

fn render(ts: &TokenStream, out: &mut String, prev: &mut Prev) {
    for tt in ts.clone() {
        match tt {
            TokenTree::Ident(i) => {
                space(out, *prev);
                out.push_str(&i.to_string());
                *prev = Prev::Operand;
            }
            TokenTree::Literal(l) => {
                space(out, *prev);
                out.push_str(&l.to_string());
                *prev = Prev::Operand;
            }
            TokenTree::Group(g) => {
                let (open, close) = match g.delimiter() {
                    Delimiter::Parenthesis => ("(", ")"),
                    Delimiter::Bracket => ("[", "]"),
                    Delimiter::Brace => ("{ ", " }"),
                    Delimiter::None => ("", ""),
                };
                // Calls and indexing attach to what they follow.
                let attached = *prev == Prev::Operand && g.delimiter() != Delimiter::Brace;
                if !attached {
                    space(out, *prev);
                }
                out.push_str(open);
                let mut inner = Prev::Start;
                render(&g.stream(), out, &mut inner);
                out.push_str(close);
                *prev = Prev::Operand;
            }
            TokenTree::Punct(p) => {
                let c = p.as_char();
                let joint = p.spacing() == Spacing::Joint;
                match c {
                    ',' | ';' => {
                        out.push(c);
                        *prev = Prev::Op;
                    }
                    '.' => {
                        out.push(c);
                        *prev = if joint { Prev::Glued } else { Prev::Start };
                    }
                    ':' if joint || out.ends_with(':') => {
                        out.push(c);
                        *prev = Prev::Glued;
                    }
                    _ => {
                        let unary = matches!(*prev, Prev::Start | Prev::Op)
                            && matches!(c, '-' | '!' | '&' | '*')
                            && !joint;
                        if *prev != Prev::Glued {
                            space(out, *prev);
                        }
                        out.push(c);
                        *prev = if joint || unary {
                            Prev::Glued
                        } else {
                            Prev::Op
                        };
                    }
                }
            }
        }
    }
}

fn space(out: &mut String, prev: Prev) {
    if matches!(prev, Prev::Operand | Prev::Op) {
        out.push(' ');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    #[test]
    fn renders_like_hand_written_rust() {
        assert_eq!(tokens_text(&quote!(local_id() < n)), "local_id() < n");
        assert_eq!(tokens_text(&quote!(x[i + 1] <= -y)), "x[i + 1] <= -y");
        assert_eq!(tokens_text(&quote!(a.max(b, c) != !d)), "a.max(b, c) != !d");
        assert_eq!(tokens_text(&quote!(f32::INFINITY)), "f32::INFINITY");
        assert_eq!(
            tokens_text(&quote!((lid..n).step_by(4))),
            "(lid..n).step_by(4)"
        );
    }
}
