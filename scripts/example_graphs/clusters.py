"""The example cluster topologies (pipeplan.v1.ClusterTopology as JSON dicts)."""


def cluster_8xa100():
    return {"devices": [{"id": "gpu%d" % i, "host": "host0", "flops": 1.5e14,
                         "memory_bytes": 80e9} for i in range(8)],
            "intra_host_bandwidth": 1.5e11}


def cluster_2x8_h100():
    return {"devices": [{"id": "node%d-gpu%d" % (h, i), "host": "node%d" % h, "flops": 4e14,
                         "memory_bytes": 80e9} for h in range(2) for i in range(8)],
            "intra_host_bandwidth": 3e11, "inter_host_bandwidth": 2.5e10}


def cluster_4_mixed():
    """Two hosts, four devices of different speed and memory, one explicit PCIe link."""
    return {"devices": [
        {"id": "a100-80g", "host": "hostA", "flops": 1.5e14, "memory_bytes": 80e9},
        {"id": "a100-40g", "host": "hostA", "flops": 1.5e14, "memory_bytes": 40e9},
        {"id": "l40s", "host": "hostB", "flops": 9e13, "memory_bytes": 48e9},
        {"id": "a10", "host": "hostB", "flops": 4e13, "memory_bytes": 24e9}],
        "links": [{"src": "l40s", "dst": "a10", "bandwidth_bytes_per_second": 2.5e10,
                   "latency_seconds": 1e-5}],
        "intra_host_bandwidth": 2e11, "inter_host_bandwidth": 1.25e10,
        "intra_host_latency": 5e-6, "inter_host_latency": 2e-5}


def cluster_16_small_mem():
    """16 devices of 16 GB: small enough that gpt_4k's memory caps bind."""
    return {"devices": [{"id": "node%d-gpu%d" % (h, i), "host": "node%d" % h, "flops": 1e14,
                         "memory_bytes": 16e9} for h in range(2) for i in range(8)],
            "intra_host_bandwidth": 1.5e11, "inter_host_bandwidth": 1.25e10}


def cluster_8x8_h100():
    """64 H100s on 8 hosts: the planner's scale benchmark (bench/search_bench.cc)."""
    return {"devices": [{"id": "node%d-gpu%d" % (h, i), "host": "node%d" % h, "flops": 4e14,
                         "memory_bytes": 80e9} for h in range(8) for i in range(8)],
            "intra_host_bandwidth": 3e11, "inter_host_bandwidth": 2.5e10}
