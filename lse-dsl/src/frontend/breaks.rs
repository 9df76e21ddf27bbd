//! `break` and `continue` may not leave a loop that contains a barrier or collective: on a
//! GPU the work-items that stay would wait at the barrier for the ones that left, and on the
//! CPU such a loop runs as a workgroup-wide phase that a single work-item cannot leave.

use super::cx::Sites;
use crate::ir::{Block, Stmt};

/// Checks every loop of `body`; errors point at the offending `break`/`continue`.
pub(super) fn check(body: &Block, sites: &Sites) -> syn::Result<()> {
    let mut path = Vec::new();
    walk(body, &mut path, sites)
}

fn walk(b: &Block, path: &mut Vec<u32>, sites: &Sites) -> syn::Result<()> {
    for (i, s) in b.iter().enumerate() {
        let i = i as u32;
        match s {
            Stmt::If {
                then_body,
                else_body,
                ..
            } => {
                nested(then_body, path, i, 0, sites, walk)?;
                nested(else_body, path, i, 1, sites, walk)?;
            }
            Stmt::For { body, .. } | Stmt::While { body, .. } => {
                if contains_sync(body) {
                    path.extend([i, 0]);
                    let jump = own_jump(body, path);
                    path.truncate(path.len() - 2);
                    if let Some(at) = jump {
                        let site = super::cx::site_at(sites, &at);
                        return Err(syn::Error::new(
                            site.span,
                            format!(
                                "`{}` is not allowed in a loop that contains a barrier or collective: every work-item must run the same iterations of such a loop; make the loop condition decide instead",
                                site.text
                            ),
                        ));
                    }
                }
                nested(body, path, i, 0, sites, walk)?;
            }
            _ => {}
        }
    }
    Ok(())
}

fn nested(
    b: &Block,
    path: &mut Vec<u32>,
    i: u32,
    branch: u32,
    sites: &Sites,
    f: fn(&Block, &mut Vec<u32>, &Sites) -> syn::Result<()>,
) -> syn::Result<()> {
    path.extend([i, branch]);
    let r = f(b, path, sites);
    path.truncate(path.len() - 2);
    r
}

/// Whether `b` contains a barrier or collective at any depth.
pub(super) fn contains_sync(b: &Block) -> bool {
    b.iter().any(|s| match s {
        Stmt::Barrier | Stmt::Collective { .. } | Stmt::Tile(_) => true,
        Stmt::If {
            then_body,
            else_body,
            ..
        } => contains_sync(then_body) || contains_sync(else_body),
        Stmt::For { body, .. } | Stmt::While { body, .. } => contains_sync(body),
        _ => false,
    })
}

/// The path of the first `break`/`continue` of the loop whose body is `b` (not of nested loops).
fn own_jump(b: &Block, path: &mut Vec<u32>) -> Option<Vec<u32>> {
    for (i, s) in b.iter().enumerate() {
        let i = i as u32;
        match s {
            Stmt::Break | Stmt::Continue => {
                let mut p = path.clone();
                p.push(i);
                return Some(p);
            }
            Stmt::If {
                then_body,
                else_body,
                ..
            } => {
                for (branch, body) in [(0, then_body), (1, else_body)] {
                    path.extend([i, branch]);
                    let found = own_jump(body, path);
                    path.truncate(path.len() - 2);
                    if found.is_some() {
                        return found;
                    }
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use crate::frontend::tests::*;

    #[test]
    fn break_in_a_loop_with_a_barrier_is_an_error() {
        let msg = e("for i in 0..n { barrier(); if i == 2 { break; } }");
        assert!(
            msg.contains("`break` is not allowed in a loop that contains a barrier or collective"),
            "{msg}"
        );
        let msg = e("while n > 0 { for j in 0..n { let t = reduce_sum(1.0); } continue; }");
        assert!(msg.contains("`continue` is not allowed"), "{msg}");
        // A break of an inner barrier-free loop is fine.
        k("for i in 0..n { for j in 0..n { if j == i { break; } } barrier(); }");
    }
}
