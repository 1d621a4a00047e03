"""Run every analysis of one trace once (SPEC §2); the views only format the result."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..model import Note, Trace
from ..processes import later, second_thread
from ..taxonomy import (
    COLLECTIVE_OP_NAME,
    COMMUNICATION_KERNEL_NAME,
    DEVICE_ACTIVITY_KINDS,
    HOST_KINDS,
    TENSOR_CORE_ELIGIBLE_OP,
    TENSOR_CORE_KERNEL,
    Kind,
)
from ..units import pct
from .breakdown import Breakdown, name_mask, step_breakdown
from .gpu_metrics import GpuSummary, device_props, gpu_summaries, is_rocm
from .links import Links, attach_by_time, link
from .memory import MemoryAnalysis, analyze_memory
from .operators import (
    DeviceAccounts,
    OpNodes,
    call_stacks,
    device_accounts,
    op_nodes,
    table_mask,
)
from .recommendations import Facts, Item, gather_facts, recommend
from .stacks import entered_ranges
from .steps import Steps, find_steps
from .tree import HostTree, build_tree


@dataclass
class Analysis:
    """Everything the views need, computed once per trace."""

    trace: Trace
    links: Links
    tree: HostTree
    steps: Steps
    breakdown: Breakdown
    gpus: list[GpuSummary]
    nodes: OpNodes
    accounts: DeviceAccounts
    stack_ids: np.ndarray
    stack_strings: list[str]
    tc_kernel: np.ndarray       # row mask: kernels using tensor cores
    comm_kernel: np.ndarray     # row mask: communication kernels
    tc_eligible_name: np.ndarray  # per string: name of a tensor-core-eligible op
    gpu: bool                   # device type GPU (runtime, kernel, memcpy or memset seen)
    rocm: bool
    has_host: bool
    has_kernels: bool
    facts: Facts
    items: list[Item]
    memory: MemoryAnalysis
    notes: list[Note] = field(default_factory=list)

    def check(self) -> None:
        """Invariants (tests call this)."""
        self.tree.check()
        self.steps.check()
        self.breakdown.check()
        self.nodes.check()
        self.accounts.check()


def communication_kernels(trace: Trace, links: Links, tree: HostTree) -> np.ndarray:
    """Row mask: kernels named nccl*/rccl*, or launched under a collective host op."""
    kernel = trace.kind == Kind.KERNEL
    comm = kernel & name_mask(trace, COMMUNICATION_KERNEL_NAME)
    collective = tree.within(name_mask(trace, COLLECTIVE_OP_NAME)[tree.rows])
    if collective.any():
        rows = np.flatnonzero(kernel)
        comm[rows] |= tree.flag_at_rows(collective, links.launching_op(rows))
    return comm


def clip_notes(trace: Trace, tree: HostTree) -> list[Note]:
    """Notes for the host events the tree clipped (SPEC §2.4.1). With ``with_stack=True``
    torch opens every record_function range (ProfilerStep#N too) inside the python frame
    that enters it, and the range outlives that frame: a healthy trace, an info note; other
    partial overlaps are a warning."""
    if not tree.clipped:
        return []
    clipped, entered = entered_ranges(trace, tree)
    notes, ranges, others = [], int(entered.sum()), int((~entered).sum())
    if ranges:
        notes.append(Note("info", "ranges_clipped_to_python_frames",
                          f"{ranges:,} record_function ranges (ProfilerStep#N included) start "
                          "inside the python frame that enters them and end after it, as "
                          "torch records them with with_stack=True; each was clipped to that "
                          "frame for the operator view (the steps, the user ranges table, "
                          "their device time and the flame graph keep their whole span)."))
    if others:
        notes.append(Note("warning", "partial_overlaps",
                          f"{others:,} host events overlapped the event they start in "
                          "without ending inside it (a record_function range left open across "
                          "prof.step(), or rounded fractional timestamps); each was clipped to "
                          "that event for the operator view and the flame graph (the user "
                          "ranges table keeps its whole span)."))
    return notes


def launch_notes(acc: DeviceAccounts) -> list[Note]:
    """Data-quality notes for device time no operator or range row shows, and for launches
    that produced no captured device activity (SPEC §2.4.8)."""
    notes = []
    if acc.unattributed_calls:
        notes.append(Note("info", "unattributed_launches",
                          f"{acc.unattributed_calls:,} runtime calls belong to no host event "
                          "(External id 0 or missing, or enclosed by no host event of their "
                          f"thread); the {us(acc.unattributed_ns)} µs of device time they "
                          "launched is in no operator row."))
    if acc.orphans:
        notes.append(Note("info", "unlaunched_device_activity",
                          f"{acc.orphans:,} device activities ({us(acc.orphan_ns)} µs) have no "
                          "launching runtime call in the trace (queued before the profiler "
                          "started, or their calls are missing from the file); they count in "
                          "the kernel view but in no operator row."))
    if acc.idle_launches:
        notes.append(Note("warning", "launches_without_activity",
                          f"{acc.idle_launches:,} launch calls (kernels, graphs, memcpys, "
                          "memsets) have no captured device activity (the profiler stopped "
                          "before they ran, or its activity buffer overflowed)."))
    return notes


def us(value_ns: int) -> str:
    """ns -> whole µs with thousands separators (rounded half to even, as the tables)."""
    return f"{round(value_ns / 1000):,}"


def _operator_accounts(trace: Trace, tree, links, tc_kernel):
    """Operator nodes, the device time they account for, and call stacks (one branch)."""
    nodes = op_nodes(trace, tree, links, tc_kernel)
    return nodes, device_accounts(trace, tree, links, nodes), call_stacks(trace, tree)


def analyze(trace: Trace) -> Analysis:
    """All analyses of ``trace`` (pure: reads the trace, returns plain data)."""
    kind_counts = np.bincount(trace.kind, minlength=len(Kind))
    gpu = bool(kind_counts[Kind.RUNTIME] or any(kind_counts[k] for k in DEVICE_ACTIVITY_KINDS))
    has_host = bool(sum(kind_counts[k] for k in HOST_KINDS))
    has_kernels = bool(kind_counts[Kind.KERNEL])
    rocm = is_rocm(trace) if gpu else False

    # on a big trace independent branches run at once in two threads (their numpy work
    # runs without the GIL): the links beside the nesting, whose threads are then nested in
    # both (x200: the tree ready after 2.3-2.6 s, not 3.0-3.3; the analysis' median over 6
    # runs 6.8 -> 6.4 s), then the operator accounts beside the step breakdown
    with second_thread(len(trace)) as pool:
        link_job = later(pool, link, trace)
        tc_kernel = name_mask(trace, TENSOR_CORE_KERNEL, among=trace.kind == Kind.KERNEL)
        tree = build_tree(trace, pool=pool)
        links = attach_by_time(trace, link_job.result(), tree)
        comm_kernel = communication_kernels(trace, links, tree)
        steps = find_steps(trace, links)
        ops_job = later(pool, _operator_accounts, trace, tree, links, tc_kernel)
        breakdown = step_breakdown(trace, steps, comm_kernel, gpu=gpu, links=links)
        gpus = gpu_summaries(trace, steps.window(), tc_kernel, links.launcher)
        nodes, accounts, (stack_ids, stack_strings) = ops_job.result()
    tc_eligible_name = np.fromiter((bool(TENSOR_CORE_ELIGIBLE_OP.search(s)) for s in trace.strings),
                                   bool, len(trace.strings))

    sums = breakdown.values.sum(axis=0)
    total = int(breakdown.totals.sum())
    shares = {c: pct(int(v), total) for c, v in zip(breakdown.categories, sums.tolist())}
    memory = analyze_memory(trace, tree, nodes,
                            lambda dev: device_props(trace, dev).get("totalGlobalMem"))
    op_pos = np.flatnonzero(table_mask(trace, tree, nodes))
    facts = gather_facts(trace, links, tree, tc_kernel, shares=shares, gpus=gpus, memory=memory,
                         host_self=(tree.rows[op_pos], nodes.host_self[op_pos]))
    facts.device_wait_share = pct(breakdown.device_wait, total)

    notes = list(steps.notes)
    if links.owners_by_time:
        notes.append(Note("info", "external_id_mismatch",
                          f"{links.owners_by_time:,} runtime calls carry an External id that "
                          "names no host event enclosing them (some Kineto versions write the "
                          "correlation id there); they were attached to the host event enclosing "
                          "them in time."))
    notes += clip_notes(trace, tree)
    notes += launch_notes(accounts)
    notes += memory.notes
    no_device = int(np.count_nonzero(trace.device[trace.kind == Kind.KERNEL] < 0))
    if no_device:
        notes.append(Note("info", "kernels_without_device",
                          f"{no_device:,} kernels carry no device id (no int args.device, no "
                          "number in their pid): they count in the step breakdown and the "
                          "kernel table, not in any GPU summary."))
    return Analysis(trace=trace, links=links, tree=tree, steps=steps, breakdown=breakdown,
                    gpus=gpus, nodes=nodes, accounts=accounts, stack_ids=stack_ids, stack_strings=stack_strings,
                    tc_kernel=tc_kernel, comm_kernel=comm_kernel,
                    tc_eligible_name=tc_eligible_name, gpu=gpu, rocm=rocm, has_host=has_host,
                    has_kernels=has_kernels, facts=facts, items=recommend(facts), memory=memory,
                    notes=notes)
