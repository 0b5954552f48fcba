//go:build linux

// Command machinespeed measures how fast this machine is right now, in the three ways a replay
// (rlctl simulate) depends on: the core's speed, the latency of memory reads that miss every
// cache, and the cost of memory that the process touches for the first time. On a shared
// virtual machine all three move from one hour to the next, and a replay's time moves with
// them; scripts/bench-simulate.sh prints these figures beside its own, so that two benchmark
// runs can be told apart by the machine as well as by the code (docs/performance.md).
//
// It prints one line:
//
//	machine: cpu 1.19 ns/step, memory 98 ns/miss, fresh memory 0.38 ms/MB (4 KB pages 11.2 µs/fault)
//
// The figures:
//   - cpu: a dependent multiply-add, one step after the other (about 4 cycles a step).
//   - memory: a chase through a random cycle of 64 MB of 4-byte indexes: each read misses the
//     caches and waits for the one before.
//   - fresh memory: 128 MB mapped, advised for transparent huge pages, and touched once. A
//     replay's heap is mostly such memory (simulate.TuneMemory). On a virtual machine whose host
//     takes back the memory the guest frees, this is the host backing it again.
//   - 4 KB pages: 16 MB of memory not advised, touched once: one page fault every 4 KB.
//
// Usage: go run ./scripts/machinespeed
package main

import (
	"fmt"
	"os"
	"syscall"
	"time"
)

func main() {
	cpu := cpuStep()
	miss := memoryMiss()
	huge, err := freshMemory(128<<20, true)
	if err != nil {
		fmt.Fprintln(os.Stderr, "machinespeed:", err)
		os.Exit(1)
	}
	small, err := freshMemory(16<<20, false)
	if err != nil {
		fmt.Fprintln(os.Stderr, "machinespeed:", err)
		os.Exit(1)
	}
	fmt.Printf("machine: cpu %.2f ns/step, memory %.0f ns/miss, fresh memory %.2f ms/MB (4 KB pages %.1f µs/fault)\n",
		cpu*1e9, miss*1e9, huge*1e3*(1<<20), small*1e6*4096)
}

// cpuStep is the seconds of one step of a chain of dependent multiply-adds.
func cpuStep() float64 {
	const steps = 200_000_000
	x := uint64(time.Now().UnixNano()) | 1
	start := time.Now()
	for i := 0; i < steps; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	d := time.Since(start)
	if x == 0 { // keeps the loop: x is odd after every step
		fmt.Println()
	}
	return d.Seconds() / steps
}

// memoryMiss is the seconds of one read in a chase through a random cycle over 64 MB.
func memoryMiss() float64 {
	const n = 16 << 20 // 4-byte indexes: 64 MB, beyond the last-level cache
	next := make([]uint32, n)
	for i := range next {
		next[i] = uint32(i)
	}
	// Sattolo's shuffle makes one cycle through every index.
	r := uint64(0x9e3779b97f4a7c15)
	for i := n - 1; i > 0; i-- {
		r ^= r << 13
		r ^= r >> 7
		r ^= r << 17
		j := int(r % uint64(i))
		next[i], next[j] = next[j], next[i]
	}
	const reads = 2_000_000
	at := uint32(0)
	start := time.Now()
	for i := 0; i < reads; i++ {
		at = next[at]
	}
	d := time.Since(start)
	if at == n { // keeps the loop
		fmt.Println()
	}
	return d.Seconds() / reads
}

// freshMemory is the seconds per byte of touching n bytes of newly mapped memory once, a byte
// in every 4 KB, advised for transparent huge pages when huge is set.
func freshMemory(n int, huge bool) (float64, error) {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return 0, fmt.Errorf("map %d bytes: %w", n, err)
	}
	defer syscall.Munmap(b)
	if huge {
		_ = syscall.Madvise(b, 14) // MADV_HUGEPAGE; without huge pages this measures small ones
	}
	start := time.Now()
	for i := 0; i < n; i += 4096 {
		b[i] = 1
	}
	return time.Since(start).Seconds() / float64(n), nil
}
