"""zerolab.engine.comm against the ZeRO paper's section 7 volumes and DeepSpeed's documented behaviour."""
import pytest

from zerolab.engine.comm import BANDWIDTHS, bandwidth, step_time, traffic, transfer_time

PSI = 13 * 10**9


@pytest.mark.parametrize("stage, volume", [(0, 2), (1, 2), (2, 2), (3, 3)])
def test_paper_volumes_per_step(stage, volume):
    """Paper 7.1-7.2: DDP 2Psi, P_os and P_os+g 2Psi ('no additional communication'), P_os+g+p 3Psi (1.5x)."""
    assert traffic(PSI, stage, 64).volume_in_params == volume


def test_gradient_accumulation():
    """ZeRO-1 and stage 0 reduce at the boundary; ZeRO-2/3 on every micro-step (engine.allreduce_gradients)."""
    gas = 8
    assert traffic(PSI, 0, 8, grad_accum=gas).volume_in_params == 2
    assert traffic(PSI, 1, 8, grad_accum=gas).volume_in_params == 2
    assert traffic(PSI, 2, 8, grad_accum=gas).volume_in_params == gas + 1
    assert traffic(PSI, 3, 8, grad_accum=gas).volume_in_params == 3 * gas


def test_zero2_reduces_13b_in_26_buckets_not_one_call():
    """Facts file 7: about 26 buckets of reduce_bucket_size = 5e8 elements for 13B, on every micro-step."""
    reduce = [c for c in traffic(PSI, 2, 8, grad_accum=4).collectives if c.op == "reduce-scatter"][0]
    assert reduce.buckets == 26 and reduce.times == 4
    smaller = [c for c in traffic(PSI, 2, 8, reduce_bucket_size=2 * 10**8).collectives if c.op == "reduce-scatter"]
    assert smaller[0].buckets == 65


def test_ring_bytes_per_rank():
    """Ring all-reduce sends 2(N-1)/N x n elements per rank; 16-bit elements are 2 bytes. One rank sends nothing."""
    assert traffic(10**9, 0, 4).wire_bytes == 2 * 3 / 4 * 10**9 * 2
    assert traffic(10**9, 0, 4, precision="fp32").wire_bytes == 2 * 3 / 4 * 10**9 * 4
    assert traffic(10**9, 3, 1).wire_bytes == 0


def test_offload_traffic_over_pcie():
    """ZeRO-2 + CPU offload, read from DeepSpeed 0.19.8's stage_1_and_2.py (and measured in test_traffic_measured.py).

    Boundary: the gradient partition is cast to fp32 on the device, then copied (4 bytes a value,
    async_inplace_copy_grad_to_fp32_buffer_from_gpu). With accumulation every micro-step copies the 16-bit gradient
    to a host buffer, which comes back to be added from the second micro-step on (async_accumulate_grad_in_cpu_via_gpu).
    After CPU Adam the 16-bit partition comes back once.
    """
    partition = PSI / 8
    one = traffic(PSI, 2, 8, offload_optimizer="cpu")
    assert (one.device_to_host_bytes, one.host_to_device_bytes) == (4 * partition, 2 * partition)
    t = traffic(PSI, 2, 8, grad_accum=4, offload_optimizer="cpu")
    assert t.device_to_host_bytes == 4 * 2 * partition + 4 * partition
    assert t.host_to_device_bytes == 3 * 2 * partition + 2 * partition
    none = traffic(PSI, 2, 8)
    assert none.device_to_host_bytes == none.host_to_device_bytes == 0
    params = traffic(PSI, 3, 8, grad_accum=2, offload_param="cpu")
    assert params.host_to_device_bytes == 2 * 2 * PSI / 8 * 2  # fetched for forward and backward, per micro-step


def test_bandwidth_presets_and_units():
    assert BANDWIDTHS["pcie3"] == 15.75e9 and BANDWIDTHS["pcie4"] == 31.5e9 and BANDWIDTHS["pcie5"] == 63e9
    assert bandwidth("200Gbps") == bandwidth("ib-hdr") == 25e9
    assert bandwidth("25GB/s") == 25e9 and bandwidth(1e9) == 1e9
    assert transfer_time(31.5e9, "pcie4") == 1.0
    for bad in ("fast", "-3GB/s", 0):
        with pytest.raises(ValueError):
            bandwidth(bad)


def test_overlap_hides_reduction_behind_backward_but_not_the_last_bucket():
    t = traffic(PSI, 2, 8)
    plain = step_time(t, compute_s=100.0, link="nvlink3")
    overlapped = step_time(t, compute_s=100.0, link="nvlink3", overlap_comm=True)
    assert plain.total_s == pytest.approx(100.0 + plain.comm_s)
    assert overlapped.total_s < plain.total_s
    gather = [c for c in t.collectives if c.op == "all-gather"][0]
    reduce = [c for c in t.collectives if c.op == "reduce-scatter"][0]
    last_bucket = reduce.wire_bytes / reduce.buckets / bandwidth("nvlink3")
    assert overlapped.exposed_s == pytest.approx(gather.wire_bytes / bandwidth("nvlink3") + last_bucket)


def test_overlap_cannot_hide_more_than_compute():
    t = traffic(PSI, 3, 64)
    tiny_compute = step_time(t, compute_s=0.001, link="ethernet-10g", overlap_comm=True)
    assert tiny_compute.exposed_s == pytest.approx(tiny_compute.comm_s, rel=1e-3)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="world_size"):
        traffic(PSI, 2, 0)
    with pytest.raises(ValueError, match="stage"):
        traffic(PSI, 5, 8)
