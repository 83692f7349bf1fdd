"""The rows of what a workload does on its GPU and host: input that comes in
bursts, GPU memory nearly full or filling up in a steady climb, utilization
that looks busy while the SMs idle, a process on CPUs far from its GPU, the
host's CPUs throttled for heat, the host's memory in use climbing, and work
bound by the GPU's memory bandwidth. ``table.py`` lists them in the table;
their rules are in ``rules.py`` (the first four) and ``workload_rules.py``."""

from __future__ import annotations

from gpu_exporter.catalogs import deep, host, pcie
from gpu_exporter.catalogs import device as dev
from gpu_exporter.catalogs import processes as procs
from gpu_exporter.diagnosis.row import Row

BURSTY_INPUT = Row(
    "utilization_bursty", "input_starvation", "warning",
    "GPU utilization swings between idle and full: the input pipeline starves it",
    "Sub-second utilization samples swing from {burst_low} or less to {burst_high} or more "
    "within the window while the 1-second average looks moderate, and nothing on the host "
    "explains it (a starved job's stall on storage, CPU or memory, listed beneath it, "
    "makes the same swings).",
    "More dataloader workers, pin_memory=True, persistent_workers=True, a larger "
    "prefetch_factor; move augmentation to the GPU.",
    ("nvidia-smi dmon -s u -d 1", "py-spy top --pid PID"),
    "Escalate to the job owner.",
    reads=(deep.UTILIZATION_SAMPLES_RATIO,))

MEMORY_NEAR_FULL = Row(
    "memory_near_full", "oom_risk", "warning",
    "GPU memory is nearly full",
    "Memory used is above {memory_near_full_ratio} of what processes can allocate (the "
    "GPU's total less what the driver reserves).",
    "Smaller batches, stable tensor shapes, allocator settings (e.g. "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True); check for leaks.",
    ("nvidia-smi --query-gpu=memory.used,memory.total --format=csv",),
    "Escalate to the job owner.",
    per_instance=True, reads=(dev.MEMORY_USED_BYTES, dev.MEMORY_TOTAL_BYTES,
                              dev.MEMORY_RESERVED_BYTES, deep.MIG_MEMORY_USED_BYTES,
                              deep.MIG_MEMORY_TOTAL_BYTES))

UTILIZATION_INFLATED = Row(
    "utilization_inflated", "small_kernels", "info",
    "GPU looks busy but its SMs mostly idle",
    "NVML utilization is above {inflated_utilization} while GPM's SM activity is below "
    "{inflated_sm_active}: many tiny kernels or synchronisation keep one kernel running while "
    "most SMs wait.",
    "Profile (Nsight Systems), fuse operations, use bigger batches and fewer sync points.",
    ("nsys profile -o trace python train.py", "nvidia-smi dmon -s u"),
    "Escalate to the job owner with a profile.",
    reads=(dev.UTILIZATION_RATIO, deep.SM_ACTIVE_RATIO),
    load_gate="the symptom is NVML's utilization reading busy while the SMs are not")

NUMA_MISPLACED = Row(
    "numa_misplaced", "cpu_affinity", "warning",
    "A GPU process runs on CPUs outside the GPU's NUMA node",
    "A process using the GPU may run on CPUs outside the GPU's local CPU list, so its "
    "host-to-device traffic crosses sockets.",
    "Pin the process and its memory to the GPU's NUMA node (numactl --cpunodebind=N "
    "--membind=N, or the job scheduler's topology settings).",
    ("nvidia-smi topo -m", "taskset -cp PID", "numactl --show"),
    "Escalate to the job owner or the scheduler's configuration.",
    per_instance=True, reads=(procs.PROCESS_CPU_AFFINITY_LOCAL, pcie.NUMA_INFO))

MEMORY_FILLING = Row(
    "memory_filling", "memory_growth", "warning",
    "GPU memory climbs steadily and will run out: out-of-memory errors ahead",
    "The GPU's (or MIG instance's) used memory rose over the whole diagnosis window "
    "({window}) in many small steps, never in one allocation, and at that rate fills what "
    "processes can allocate within {memory_full_within}: a job that fails with "
    "out-of-memory while memory looks free is one that kept growing. The evidence gives the "
    "growth rate, the time to full and the processes holding the most. Memory that holds "
    "still, shrinks or rose in one step is no climb.",
    "Look for what the job keeps: tensors held in lists (losses kept with their graphs), "
    "caches without a bound, growing sequence lengths or batch shapes; call "
    "torch.cuda.memory_summary() at intervals, set PYTORCH_CUDA_ALLOC_CONF="
    "expandable_segments:True against fragmentation.",
    ("nvidia-smi --query-compute-apps=pid,used_memory --format=csv -l 10",
     "nvidia-smi --query-gpu=memory.used,memory.total --format=csv -l 10"),
    "Escalate to the job owner with the growth rate and the time to full.",
    per_instance=True,
    reads=(dev.MEMORY_USED_BYTES, dev.MEMORY_TOTAL_BYTES, dev.MEMORY_RESERVED_BYTES,
           deep.MIG_MEMORY_USED_BYTES, deep.MIG_MEMORY_TOTAL_BYTES,
           procs.PROCESS_MEMORY_USED_BYTES))

HOST_CPU_THERMAL = Row(
    "slowing_over_time", "host_cpu_thermal", "warning",
    "The host's CPUs are throttled for heat: the job feeding the GPU slows down",
    "A job holds the GPU and the host's CPU cores or packages went over their temperature "
    "limit again and again across the diagnosis window ({window}): their thermal throttle "
    "counters rose in its first half and in its second, and where the kernel counts the "
    "time, the cores spent at least {cpu_thermal_throttled_ratio} of the window throttled. "
    "Every CPU-side step of the job (data loading, kernel launches) runs slower, and a job "
    "that was fast gets slower as the node heats up. One throttle event is no slowdown.",
    "Check the node's cooling: fans and airflow (blanking panels, cable blockage), the "
    "inlet temperature, the CPU heatsinks and their thermal paste; check the BIOS power "
    "profile. Drain the node while its CPUs keep throttling.",
    ("grep . /sys/devices/system/cpu/cpu*/thermal_throttle/*_count",
     "ipmitool sdr type Temperature", "turbostat --quiet --show PkgTmp,Bzy_MHz sleep 5"),
    "Escalate to the datacenter or hardware team when the CPUs throttle after the airflow "
    "was checked.",
    reads=(host.HOST_CPU_THERMAL_THROTTLES_TOTAL,
           host.HOST_CPU_THERMAL_THROTTLED_SECONDS_TOTAL))

HOST_MEMORY_GROWTH = Row(
    "slowing_over_time", "host_memory_growth", "warning",
    "The host's memory in use climbs steadily: the job will slow down, then swap or be killed",
    "A job holds the GPU and the host's memory in use (MemTotal less MemAvailable in "
    "/proc/meminfo) rose over the whole diagnosis window ({window}) in many small steps, "
    "never in one allocation, and at that rate leaves no memory available within "
    "{host_memory_full_within}. As it climbs, the kernel drops the page cache the job's "
    "input reads from (each epoch reads from disk again), then swaps, then the OOM killer "
    "ends a process: a job that gets slower hour by hour on a host whose free memory "
    "shrinks. The evidence gives the growth rate and the time until none is available. "
    "Memory that holds still, falls or rose in one step is no climb.",
    "Find what grows: the processes by resident memory now and a few minutes later (data loader "
    "workers that copy the dataset, caches without a bound, pinned-memory buffers kept per "
    "batch, a logging or metrics buffer); fix the leak or bound the cache, set a memory "
    "limit on the job so it is stopped before the node.",
    ("watch -n 10 'grep -E \"MemTotal|MemAvailable\" /proc/meminfo'",
     "ps aux --sort=-rss | head -15", "vmstat 5"),
    "Escalate to the job owner with the growth rate and the process whose memory grows.",
    reads=(host.HOST_MEMORY_AVAILABLE_BYTES, host.HOST_MEMORY_TOTAL_BYTES))

MEMORY_BOUND = Row(
    "memory_bound", "dram_bandwidth", "info",
    "The GPU's work is bound by its memory bandwidth, not its compute",
    "GPM reads the GPU's DRAM bandwidth at least {memory_bound_dram_active} used while its "
    "SMs are active at least half the time and, where GPM reads them, its tensor pipes "
    "less than a third: the kernels wait on memory, not on arithmetic. A newer GPU with "
    "more compute speeds such work up only as far as its memory bandwidth grew. Where GPM "
    "is not read (before Hopper) this is not judged.",
    "Profile the kernels (Nsight Compute's memory workload analysis): fuse element-wise "
    "operations, use lower-precision activations (bf16/fp8), larger batches or "
    "FlashAttention-style kernels that reuse what they load.",
    ("ncu --section MemoryWorkloadAnalysis python train.py", "nvidia-smi dmon -s u"),
    "Escalate to the job owner with a profile; no fault of the node's makes it so.",
    reads=(deep.DRAM_ACTIVE_RATIO, deep.SM_ACTIVE_RATIO, deep.TENSOR_ACTIVE_RATIO),
    load_gate="memory-bound describes work: a GPU whose SMs rest has no work to be bound")
