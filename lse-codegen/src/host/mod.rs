//! Host lowering of the work-item-loop form: one function with the `HostEntry` C ABI that
//! runs workgroups `[group_begin, group_end)`, each phase of the schedule in turn.
//!
//! Every `Phase::Region` is a loop over `lid = 0..WG` whose memory accesses share one access
//! group declared `llvm.loop.parallel_accesses` (work-items of a region never depend on each
//! other without a barrier), with `llvm.loop.vectorize.enable`, so LLVM may vectorise across
//! work-items; the vectorised loop (a few vectors of work-items) is then fully unrolled, so
//! per-work-item variables live in registers across an enclosing interchanged `for`. Private
//! variables are scalar allocas (promoted by mem2reg), PerItem variables `[WG x T]` allocas,
//! shared arrays per-call allocas. Regions holding `for` loops with workgroup-uniform bounds
//! are interchanged so the work-item loop is innermost ([`split`]); pure integer `let`s of
//! such a region are first written out at their uses ([`remat`]).

mod remat;
mod split;
mod tiles;

use crate::emit::{
    bool_to_byte, byte_to_bool, combine, combine_argmax, lty, var_lty, Emitter, Lowered,
    ModuleText, TargetStmts, VarLoc,
};
use lse_dsl::ir::{CollectiveOp, Expr, Param, Stmt, TileOp, Ty, VarId};
use lse_dsl::wil::{Phase, VarStorage, WilKernel};

/// The largest workgroup whose vectorised work-item loops are fully unrolled (see
/// [`HostPhases::region`]).
const FULL_UNROLL_MAX: u32 = 64;

/// What LLVM is asked to do with a parallel loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LoopHint {
    /// Nothing (a loop with an inner loop: the vectoriser cannot act on it, and LLVM would
    /// warn about a forced vectorisation it cannot do).
    Plain,
    /// `llvm.loop.vectorize.enable` (a loop-free body).
    Vectorize,
    /// [`LoopHint::Vectorize`], then full unrolling of the vectorised loop.
    VectorizeUnrolled,
}

/// Lowers `w` to an LLVM module for host `cpu`; `data_layout` comes from the target machine.
pub(crate) fn module_text(w: &WilKernel, cpu: &str, data_layout: &str) -> Result<String, String> {
    let k = w.kernel;
    let wg = k.workgroup_size;
    if wg == 0 || !wg.is_power_of_two() || wg > 1024 {
        return Err(format!(
            "workgroup size {wg} is not a power of two in 1..=1024"
        ));
    }
    if w.storage.len() != k.locals.len() {
        return Err(format!(
            "work-item-loop form has storage for {} variables, the kernel declares {}",
            w.storage.len(),
            k.locals.len()
        ));
    }
    // The level's LLVM cpu and features: the function's attributes, and which `tile_dot`
    // lowerings it may use.
    let (llvm_cpu, features) = lse_dsl::rt::host_level_target(cpu).unwrap_or((cpu, ""));
    let mut e = Emitter::new(k, "ptr", "ptr", "ptr");
    let (mut nbuf, mut nscalar) = (0u32, 0u32);
    for (i, p) in k.params.iter().enumerate() {
        match p {
            Param::Buffer { .. } => {
                let slot = e.b.op(format!(
                    "getelementptr inbounds {{ ptr, i64 }}, ptr %bufs, i64 {nbuf}, i32 0"
                ));
                e.bufs[i] = Some(e.b.op(format!("load ptr, ptr {slot}, align 8")));
                nbuf += 1;
            }
            Param::Scalar { ty, .. } => {
                let slot = e.b.op(format!(
                    "getelementptr inbounds i64, ptr %scalars, i64 {nscalar}"
                ));
                let raw = e.b.op(format!("load i64, ptr {slot}, align 8"));
                let v = match ty {
                    Ty::F32 => {
                        let lo = e.b.op(format!("trunc i64 {raw} to i32"));
                        e.b.op(format!("bitcast i32 {lo} to float"))
                    }
                    t => e.b.op(format!("trunc i64 {raw} to {}", lty(*t))),
                };
                e.scalars[i] = Some(v);
                nscalar += 1;
            }
        }
    }
    for s in &k.shared {
        let p = e.alloca(&format!("[{} x {}]", s.len, lty(s.elem)), 16);
        e.shared.push(p);
    }
    for (l, st) in k.locals.iter().zip(&w.storage) {
        let loc = match st {
            VarStorage::PerItem => {
                VarLoc::PerItem(e.alloca(&format!("[{wg} x {}]", var_lty(l.ty)), 16))
            }
            VarStorage::Private | VarStorage::Uniform => e.scalar_var(l.ty),
        };
        e.vars.push(loc);
    }
    for d in 0..3 {
        let p =
            e.b.op(format!("getelementptr inbounds i32, ptr %ng, i64 {d}"));
        e.num_groups[d] = e.b.op(format!("load i32, ptr {p}, align 4"));
    }
    // Loop over linearised group ids, x fastest.
    let (gbody, glatch, gexit) = (
        e.b.label("group.body"),
        e.b.label("group.latch"),
        e.b.label("group.exit"),
    );
    let any = e.b.op("icmp ult i32 %group_begin, %group_end");
    let pre = e.b.cur.clone();
    e.b.cbr(&any, &gbody, &gexit);
    e.b.start(&gbody);
    let g = e.b.fresh();
    let gnext = e.b.fresh();
    e.b.ins(format!(
        "{g} = phi i32 [ %group_begin, %{pre} ], [ {gnext}, %{glatch} ]"
    ));
    let (ngx, ngy) = (e.num_groups[0].clone(), e.num_groups[1].clone());
    e.group_id[0] = e.b.op(format!("urem i32 {g}, {ngx}"));
    let rest = e.b.op(format!("udiv i32 {g}, {ngx}"));
    e.group_id[1] = e.b.op(format!("urem i32 {rest}, {ngy}"));
    e.group_id[2] = e.b.op(format!("udiv i32 {rest}, {ngy}"));
    let mut host = HostPhases {
        wg,
        storage: w.storage.clone(),
        tiles: Vec::new(),
        amx: features.contains("+amx-bf16"),
        dpbf16: features.contains("+avx512bf16"),
        vnni: features.contains("+avx512vnni"),
        fma: llvm_cpu != "x86-64",
        zmm: llvm_cpu == "x86-64-v4",
        loops: Vec::new(),
        kernel_defs: remat::kernel_wide(&k.body, &w.storage),
    };
    host.tiles = tiles::allocate(&mut e, k, |elem| host.pair_dot(elem), host.fma);
    tiles::zero_all(&mut e, &host.tiles);
    host.phases(&mut e, &w.phases)?;
    e.b.br(&glatch);
    e.b.start(&glatch);
    e.b.ins(format!("{gnext} = add i32 {g}, 1"));
    let more = e.b.op(format!("icmp ult i32 {gnext}, %group_end"));
    e.b.cbr(&more, &gbody, &gexit);
    e.b.start(&gexit);
    e.b.ins("ret void");

    let sym = lse_dsl::rt::host_symbol(&k.fn_name, cpu);
    let comment = format!(
        "; LOOM kernel {} ({}) for host cpu {cpu}",
        k.id(),
        k.fn_name
    );
    let define = format!(
        "define void @{sym}(ptr noalias nocapture readonly %bufs, ptr noalias nocapture readonly %scalars, \
         ptr noalias nocapture readonly %ng, i32 %group_begin, i32 %group_end) #0 {{"
    );
    // LLVM prefers 256-bit vectors on AVX-512 cpus by default (clock throttling on old
    // parts); the work-item loops are plain streams of FMAs, which gain from full width.
    let width = if llvm_cpu == "x86-64-v4" {
        " \"prefer-vector-width\"=\"512\""
    } else {
        ""
    };
    let features = if features.is_empty() {
        String::new()
    } else {
        format!(" \"target-features\"=\"{features}\"")
    };
    let trailer = format!(
        "attributes #0 = {{ nounwind \"target-cpu\"=\"{llvm_cpu}\"{features}{width} }}\n\n"
    );
    let out = e.b.module(ModuleText {
        comment: &comment,
        data_layout,
        triple: crate::llvm::HOST_TRIPLE,
        globals: "",
        define: &define,
        trailer: &trailer,
    });
    Ok(out)
}

/// Lowers phases; inside regions barriers and collectives cannot occur.
struct HostPhases {
    wg: u32,
    storage: Vec<VarStorage>,
    /// The kernel's tiles, by `TileId`.
    tiles: Vec<tiles::HostTile>,
    /// Whether `tile_dot` may use AMX.
    amx: bool,
    /// Whether `tile_dot` may use `vdpbf16ps` (AVX512-BF16).
    dpbf16: bool,
    /// Whether `tile_dot` of i16 tiles may use `vpdpwssd` (AVX512-VNNI).
    vnni: bool,
    /// Whether the CPU has FMA (every level but baseline `x86-64`): f32 `tile_dot` runs in
    /// register blocks.
    fma: bool,
    /// Whether the CPU has AVX-512's 32 vector registers of 16 floats (x86-64-v4 levels); the
    /// AVX2 levels have 16 of 8, which sizes `tile_dot`'s register blocks.
    zmm: bool,
    /// The variables and steps of the uniform `for` loops around the phase being lowered,
    /// innermost last: a tile load prefetches the window it will read one step later.
    loops: Vec<(VarId, Expr)>,
    /// Per-work-item variables written at their uses in every region
    /// ([`remat::kernel_wide`]).
    kernel_defs: Vec<Option<Expr>>,
}

impl TargetStmts for HostPhases {
    fn sync_stmt(&mut self, _: &mut Emitter, s: &Stmt) -> Lowered<()> {
        Err(format!(
            "{} inside a work-item-loop region (the work-item-loop transform must split it out)",
            match s {
                Stmt::Barrier => "barrier",
                Stmt::Tile(_) => "tile statement",
                _ => "collective",
            }
        ))
    }
}

impl HostPhases {
    fn phases(&mut self, e: &mut Emitter, phases: &[Phase]) -> Lowered<()> {
        let mut rest = phases;
        while let Some((p, after)) = rest.split_first() {
            // A `tile_dequant` whose sums are zeroed next (a K-quant block's, for the next
            // block) zeroes each as it reads it: one pass over them instead of two.
            if let (Phase::Tile(dequant @ TileOp::Dequant { src, .. }), Some(next)) =
                (p, after.first())
            {
                if *next == Phase::Tile(TileOp::Zero { dst: *src }) && self.zeroes_in_place(*src) {
                    self.dequant(e, dequant, true);
                    rest = &after[1..];
                    continue;
                }
            }
            self.phase(e, p)?;
            rest = after;
        }
        Ok(())
    }

    /// A loop `iv = 0..n` (n >= 1) whose memory accesses are independent across iterations;
    /// `body` gets the induction variable; `hint` says what LLVM is asked to do with it.
    fn parallel_loop(
        &mut self,
        e: &mut Emitter,
        n: u32,
        hint: LoopHint,
        body: impl FnOnce(&mut Self, &mut Emitter, &str),
    ) {
        let group = e.b.md("distinct !{}");
        let par =
            e.b.md(&format!("!{{!\"llvm.loop.parallel_accesses\", {group}}}"));
        // Full unrolling would run before the vectoriser and erase the work-item loop (its
        // trip count is a small constant), leaving the vectoriser the enclosing loop, where
        // accesses are strided: the vectoriser interleaves instead.
        let no_unroll = e.b.md("!{!\"llvm.loop.unroll.disable\"}");
        let lmd = if hint != LoopHint::Plain {
            let vec = e.b.md("!{!\"llvm.loop.vectorize.enable\", i1 true}");
            let followup = if hint == LoopHint::VectorizeUnrolled {
                let full = e.b.md("!{!\"llvm.loop.unroll.full\"}");
                let followup = e.b.md(&format!(
                    "!{{!\"llvm.loop.vectorize.followup_vectorized\", {full}}}"
                ));
                format!(", {followup}")
            } else {
                String::new()
            };
            e.b.md(&format!(
                "distinct !{{{{self}}, {par}, {no_unroll}, {vec}{followup}}}"
            ))
        } else {
            e.b.md(&format!("distinct !{{{{self}}, {par}, {no_unroll}}}"))
        };
        let saved_md = std::mem::replace(&mut e.mem_md, format!(", !llvm.access.group {group}"));
        self.counted_loop(e, n, &format!(", !llvm.loop {lmd}"), body);
        e.mem_md = saved_md;
    }

    /// `iv = 0..n` (n >= 1) with `loop_md` appended to the back-edge branch.
    fn counted_loop(
        &mut self,
        e: &mut Emitter,
        n: u32,
        loop_md: &str,
        body: impl FnOnce(&mut Self, &mut Emitter, &str),
    ) {
        let pre = e.b.cur.clone();
        let (lbody, latch, exit) = (
            e.b.label("loop.body"),
            e.b.label("loop.latch"),
            e.b.label("loop.exit"),
        );
        e.b.br(&lbody);
        e.b.start(&lbody);
        let iv = e.b.fresh();
        let next = e.b.fresh();
        e.b.ins(format!(
            "{iv} = phi i32 [ 0, %{pre} ], [ {next}, %{latch} ]"
        ));
        body(self, e, &iv);
        e.b.br(&latch);
        e.b.start(&latch);
        e.b.ins(format!("{next} = add nuw i32 {iv}, 1"));
        let more = e.b.op(format!("icmp ult i32 {next}, {n}"));
        e.b.ins(format!(
            "br i1 {more}, label %{lbody}, label %{exit}{loop_md}"
        ));
        e.b.start(&exit);
    }

    /// A loop `iv = 0..n` (n >= 1) whose iterations run in order (no parallel-access claim).
    fn sequential_loop(
        &mut self,
        e: &mut Emitter,
        n: u32,
        body: impl FnOnce(&mut Self, &mut Emitter, &str),
    ) {
        self.counted_loop(e, n, "", body);
    }

    /// Runs `body` once per work-item with `e.lid` set.
    fn region(
        &mut self,
        e: &mut Emitter,
        loop_free: bool,
        body: impl FnOnce(&mut Self, &mut Emitter) -> Lowered<()>,
    ) -> Lowered<()> {
        let wg = self.wg;
        let mut result = Ok(());
        // Once vectorised, a loop over at most 64 work-items has a few iterations (4 vectors
        // of 16, or 8 of 8); unrolling it fully gives each vector's per-work-item variables
        // constant addresses, which SROA then keeps in registers across an enclosing
        // interchanged `for` instead of storing and reloading them every step. Larger
        // workgroups, and baseline x86-64's loops (16 vectors of 4), stay rolled: unrolling
        // every loop more than doubled the host code.
        let hint = if !loop_free {
            LoopHint::Plain
        } else if wg <= FULL_UNROLL_MAX && self.fma {
            LoopHint::VectorizeUnrolled
        } else {
            LoopHint::Vectorize
        };
        self.parallel_loop(e, wg, hint, |s, e, lid| {
            let saved = std::mem::replace(&mut e.lid, lid.to_string());
            result = body(s, e);
            e.lid = saved;
        });
        result
    }

    /// Evaluates a uniform expression as work-item 0.
    fn uniform(&mut self, e: &mut Emitter, x: &Expr) -> Lowered<String> {
        let saved = std::mem::replace(&mut e.lid, "0".into());
        let v = e.expr(x);
        e.lid = saved;
        v
    }

    fn phase(&mut self, e: &mut Emitter, p: &Phase) -> Lowered<()> {
        match p {
            Phase::Region(block) => {
                // Index-like lets are written at their uses first: a uniform loop bound
                // named by a `let` (of this region or an earlier one) then counts as
                // uniform, and a split region does not move such lets to per-work-item
                // slots (see [`remat`]).
                let block = &remat::rewrite_uses(block, &self.kernel_defs);
                let inlined = remat::substitute(block, &self.storage);
                if split::wants_split(&inlined, &self.storage, &[]) {
                    self.split_region(e, &inlined)
                } else {
                    self.region(e, !has_loop(block), |s, e| e.block(s, block))
                }
            }
            Phase::If {
                cond,
                then_phases,
                else_phases,
            } => {
                let c = self.uniform(e, cond)?;
                e.if_else(&c, &mut |e, taken| {
                    self.phases(e, if taken { then_phases } else { else_phases })
                })
            }
            Phase::For {
                var,
                start,
                end,
                step,
                body,
            } => {
                // Bounds and the loop variable are read as work-item 0; regions inside set
                // their own work-item id.
                let saved = std::mem::replace(&mut e.lid, "0".into());
                self.loops.push((*var, step.clone()));
                let r = match self.fused_dot(e.k, *var, step, body) {
                    Some(f) => self.fused_dot_loop(e, [start, end, step], &f, body),
                    None => e.for_loop(*var, start, end, step, &mut |e| self.phases(e, body)),
                };
                self.loops.pop();
                e.lid = saved;
                r
            }
            Phase::While { cond, body } => {
                let (head, lbody, exit) = (
                    e.b.label("ph.head"),
                    e.b.label("ph.body"),
                    e.b.label("ph.exit"),
                );
                e.b.br(&head);
                e.b.start(&head);
                let c = self.uniform(e, cond)?;
                e.b.cbr(&c, &lbody, &exit);
                e.b.start(&lbody);
                self.phases(e, body)?;
                e.b.br(&head);
                e.b.start(&exit);
                Ok(())
            }
            Phase::Collective { op, dst, args } => self.collective(e, *op, dst, args),
            Phase::Tile(op) => self.tile(e, op),
        }
    }

    /// Lowers a region whose uniform `for` loops run once per workgroup with work-item
    /// loops inside (see [`split`]). Variables the region assigns move to per-work-item
    /// slots, and divergent `if`s around such loops become per-work-item masks.
    fn split_region(&mut self, e: &mut Emitter, block: &[Stmt]) -> Lowered<()> {
        let uniform = split::uniform_lets(block, &self.storage, &e.k.params);
        let mut vars = Vec::new();
        split::assigned_vars(block, &mut vars);
        vars.sort_unstable();
        vars.dedup();
        for v in vars {
            if self.storage.get(v as usize) == Some(&VarStorage::Private) && !uniform.contains(&v) {
                let ty = e.k.locals[v as usize].ty;
                let wg = self.wg;
                e.vars[v as usize] =
                    VarLoc::PerItem(e.alloca(&format!("[{wg} x {}]", var_lty(ty)), 16));
            }
        }
        self.split_block(e, block, None, &mut Vec::new(), &uniform)
    }

    /// Lowers `block` of a split region for the work-items whose `mask` flag is set (all if
    /// `None`); `hoisted` are the variables of the enclosing interchanged loops, `uniform` the
    /// region's lets that stay one scalar ([`split::uniform_lets`]).
    fn split_block(
        &mut self,
        e: &mut Emitter,
        block: &[Stmt],
        mask: Option<&str>,
        hoisted: &mut Vec<VarId>,
        uniform: &[VarId],
    ) -> Lowered<()> {
        let mut pending: Vec<&Stmt> = Vec::new();
        for s in block {
            match s {
                // Run by every work-item with one value for all (`split::uniform_lets`): once,
                // as work-item 0, into the variable's scalar.
                Stmt::Let { var, value } if mask.is_none() && uniform.contains(var) => {
                    self.masked_region(e, &pending, mask)?;
                    pending.clear();
                    let v = self.uniform(e, value)?;
                    e.write_var(*var, &v)?;
                }
                Stmt::For {
                    var,
                    start,
                    end,
                    step,
                    body,
                } if split::hoistable(s, &self.storage, hoisted) => {
                    self.masked_region(e, &pending, mask)?;
                    pending.clear();
                    hoisted.push(*var);
                    let saved = std::mem::replace(&mut e.lid, "0".into());
                    let r = e.for_loop(*var, start, end, step, &mut |e| {
                        self.split_block(e, body, mask, hoisted, uniform)
                    });
                    e.lid = saved;
                    r?;
                    hoisted.pop();
                }
                Stmt::If {
                    cond,
                    then_body,
                    else_body,
                } if split::wants_split(then_body, &self.storage, hoisted)
                    || split::wants_split(else_body, &self.storage, hoisted) =>
                {
                    self.masked_region(e, &pending, mask)?;
                    pending.clear();
                    let wg = self.wg;
                    let on_then = e.alloca(&format!("[{wg} x i8]"), 16);
                    let on_else = e.alloca(&format!("[{wg} x i8]"), 16);
                    self.region(e, true, |_, e| {
                        let lid = e.lid.clone();
                        let active = match mask {
                            Some(m) => flag(e, m, &lid, None),
                            None => "true".into(),
                        };
                        // The condition is evaluated only by active work-items.
                        let from = e.b.cur.clone();
                        let (eval, join) = (e.b.label("mask.eval"), e.b.label("mask.join"));
                        e.b.cbr(&active, &eval, &join);
                        e.b.start(&eval);
                        let c = e.expr(cond)?;
                        let from_eval = e.b.cur.clone();
                        e.b.br(&join);
                        e.b.start(&join);
                        let t =
                            e.b.op(format!("phi i1 [ false, %{from} ], [ {c}, %{from_eval} ]"));
                        let not_c = e.b.op(format!("xor i1 {t}, true"));
                        let f = e.b.op(format!("and i1 {active}, {not_c}"));
                        flag(e, &on_then, &lid, Some(&t));
                        flag(e, &on_else, &lid, Some(&f));
                        Ok(())
                    })?;
                    self.split_block(e, then_body, Some(&on_then), hoisted, uniform)?;
                    self.split_block(e, else_body, Some(&on_else), hoisted, uniform)?;
                }
                _ => pending.push(s),
            }
        }
        self.masked_region(e, &pending, mask)
    }

    /// A work-item loop running `stmts` for the work-items whose `mask` flag is set. Under a
    /// mask, the per-work-item variables the statements assign are read into private
    /// scalars first and written back after, by every work-item (an inactive one writes back
    /// what it read): the slots' stores are then unconditional, so the unrolled work-item
    /// loop keeps them in registers across an enclosing interchanged `for`, where masked
    /// stores had kept them in memory (a store and a reload per step: 30% of the DeltaNet
    /// conv's time, in its loop over the taps).
    fn masked_region(
        &mut self,
        e: &mut Emitter,
        stmts: &[&Stmt],
        mask: Option<&str>,
    ) -> Lowered<()> {
        if stmts.is_empty() {
            return Ok(());
        }
        let mut lifted = Vec::new();
        if mask.is_some() {
            for s in stmts {
                split::assigned_vars(std::slice::from_ref(*s), &mut lifted);
            }
            lifted.sort_unstable();
            lifted.dedup();
            lifted.retain(|&v| matches!(e.vars.get(v as usize), Some(VarLoc::PerItem(_))));
        }
        let loop_free = !stmts.iter().any(|s| has_loop(std::slice::from_ref(*s)));
        self.region(e, loop_free, |h, e| {
            let mut slots = Vec::new();
            for &v in &lifted {
                let value = e.read_var(v)?;
                let scalar = e.scalar_var(e.k.locals[v as usize].ty);
                slots.push(std::mem::replace(&mut e.vars[v as usize], scalar));
                e.write_var(v, &value)?;
            }
            let skip = mask.map(|m| {
                let lid = e.lid.clone();
                let on = flag(e, m, &lid, None);
                let (run, skip) = (e.b.label("masked.run"), e.b.label("masked.skip"));
                e.b.cbr(&on, &run, &skip);
                e.b.start(&run);
                skip
            });
            for s in stmts {
                e.stmt(h, s)?;
            }
            if let Some(skip) = skip {
                e.b.br(&skip);
                e.b.start(&skip);
            }
            for (&v, slot) in lifted.iter().zip(slots) {
                let value = e.read_var(v)?;
                e.vars[v as usize] = slot;
                e.write_var(v, &value)?;
            }
            Ok(())
        })
    }

    /// A collective over the work-items' values: the tree of `ir::tree_steps` within each
    /// group of `op.width` work-items (the workgroup, or a subgroup), or a lane read.
    fn collective(
        &mut self,
        e: &mut Emitter,
        op: CollectiveOp,
        dst: &[u32],
        args: &[Expr],
    ) -> Lowered<()> {
        let ty = e.check_collective(op, dst, args)?;
        let wg = self.wg;
        let width = op.width(e.k);
        let t = lty(ty);
        let vals = e.alloca(&format!("[{wg} x {t}]"), 16);
        let idxs = if matches!(op, CollectiveOp::Argmax | CollectiveOp::SubgroupShuffle) {
            e.alloca(&format!("[{wg} x i32]"), 16)
        } else {
            String::new()
        };
        let slot = |e: &mut Emitter, arr: &str, t: &str, i: &str| -> String {
            e.b.op(format!("getelementptr inbounds {t}, ptr {arr}, i32 {i}"))
        };
        let load = |e: &mut Emitter, arr: &str, t: &str, i: &str| -> String {
            let p = slot(e, arr, t, i);
            let md = e.mem_md.clone();
            e.b.op(format!("load {t}, ptr {p}, align 4{md}"))
        };
        let store = |e: &mut Emitter, arr: &str, t: &str, i: &str, v: &str| {
            let p = slot(e, arr, t, i);
            let md = e.mem_md.clone();
            e.b.ins(format!("store {t} {v}, ptr {p}, align 4{md}"));
        };
        // The first work-item of the caller's group of `width`.
        let group_base = |e: &mut Emitter, lid: &str| -> String {
            e.b.op(format!("and i32 {lid}, {}", !(width - 1) as i32))
        };
        // Every work-item's arguments (and, for a shuffle, the work-item it reads).
        self.region(e, true, |_, e| {
            let lid = e.lid.clone();
            let v = e.expr(&args[0])?;
            store(e, &vals, t, &lid, &v);
            if op == CollectiveOp::Argmax {
                let x = e.expr(&args[1])?;
                store(e, &idxs, "i32", &lid, &x);
            } else if op == CollectiveOp::SubgroupShuffle {
                let lane = e.expr(&args[1])?;
                let lane = e.b.op(format!("and i32 {lane}, {}", width - 1));
                let base = group_base(e, &lid);
                let from = e.b.op(format!("or i32 {base}, {lane}"));
                store(e, &idxs, "i32", &lid, &from);
            }
            Ok(())
        })?;
        if op == CollectiveOp::SubgroupShuffle {
            return self.region(e, true, |_, e| {
                let lid = e.lid.clone();
                let from = load(e, &idxs, "i32", &lid);
                let v = load(e, &vals, t, &from);
                e.write_var(dst[0], &v)
            });
        }
        let (rv, ri) = if op == CollectiveOp::Broadcast {
            let lane = self.uniform(e, &args[1])?;
            (load(e, &vals, t, &lane), String::new())
        } else {
            let groups = wg / width;
            for s in lse_dsl::ir::tree_steps(width) {
                // Iteration `i` combines lane `i % s` of group `i / s`.
                self.parallel_loop(e, groups * s, LoopHint::Vectorize, |_, e, i| {
                    let i = &if groups == 1 {
                        i.to_string()
                    } else {
                        let g = e.b.op(format!("udiv i32 {i}, {s}"));
                        let base = e.b.op(format!("mul i32 {g}, {width}"));
                        let r = e.b.op(format!("urem i32 {i}, {s}"));
                        e.b.op(format!("add i32 {base}, {r}"))
                    };
                    let j = e.b.op(format!("add i32 {i}, {s}"));
                    if op == CollectiveOp::Argmax {
                        let (av, ai) = (load(e, &vals, t, i), load(e, &idxs, "i32", i));
                        let (bv, bi) = (load(e, &vals, t, &j), load(e, &idxs, "i32", &j));
                        let (v, x) = combine_argmax(&mut e.b, &av, &ai, &bv, &bi);
                        store(e, &vals, t, i, &v);
                        store(e, &idxs, "i32", i, &x);
                    } else {
                        let a = load(e, &vals, t, i);
                        let b = load(e, &vals, t, &j);
                        let r = combine(&mut e.b, op.reduction(), ty, &a, &b)
                            .expect("check_collective admits only f32, i32 and u32");
                        store(e, &vals, t, i, &r);
                    }
                });
            }
            if width < wg {
                // Each work-item takes its subgroup's result.
                return self.region(e, true, |_, e| {
                    let lid = e.lid.clone();
                    let base = group_base(e, &lid);
                    let v = load(e, &vals, t, &base);
                    e.write_var(dst[0], &v)
                });
            }
            let ri = if op == CollectiveOp::Argmax {
                load(e, &idxs, "i32", "0")
            } else {
                String::new()
            };
            (load(e, &vals, t, "0"), ri)
        };
        self.region(e, true, |_, e| {
            e.write_var(dst[0], &rv)?;
            if op == CollectiveOp::Argmax {
                e.write_var(dst[1], &ri)?;
            }
            Ok(())
        })
    }
}

/// Whether `block` contains a `for` or `while` loop.
fn has_loop(block: &[Stmt]) -> bool {
    block.iter().any(|s| match s {
        Stmt::For { .. } | Stmt::While { .. } => true,
        Stmt::If {
            then_body,
            else_body,
            ..
        } => has_loop(then_body) || has_loop(else_body),
        _ => false,
    })
}

/// Loads (`value` = None) or stores a work-item's flag in a mask array, a byte per flag like
/// every stored `bool` ([`var_lty`]: LLVM vectorises loads of bytes, not of `i1`).
fn flag(e: &mut Emitter, arr: &str, lid: &str, value: Option<&str>) -> String {
    let p =
        e.b.op(format!("getelementptr inbounds i8, ptr {arr}, i32 {lid}"));
    let md = e.mem_md.clone();
    match value {
        Some(v) => {
            let byte = bool_to_byte(&mut e.b, v);
            e.b.ins(format!("store i8 {byte}, ptr {p}, align 1{md}"));
            String::new()
        }
        None => {
            let byte = e.b.op(format!("load i8, ptr {p}, align 1{md}"));
            byte_to_bool(&mut e.b, &byte)
        }
    }
}
