"""The kernel layer: the libbpf extension (_libbpf), the BPF loader, the ABI mirrors of bpf/*.h and the
readers shared by every BPF tool (stamps, the in-flight slot table)."""
