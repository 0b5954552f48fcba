package simulate

import (
	"os"
	"runtime/debug"
	"strings"
	"syscall"
	"unsafe"
)

// hugePage is the size of a transparent huge page on x86-64, and on arm64 with 4 KB pages.
const hugePage = 2 << 20

// adviseHugePages asks Linux to back the next n bytes of the Go heap with transparent huge
// pages, and returns the address range it advised (both 0 when it advised none).
//
// A replay's heap is mostly fresh memory: its live keys grow to a few hundred megabytes and
// are seldom collected, so nearly every 4 KB page of it is faulted in once, and on a virtual
// machine a fault costs microseconds (about 10 µs on the machines of docs/performance.md, a
// tenth of a replay's CPU). Its key states are also read in random order, which small pages
// make a TLB miss each. Go no longer asks for huge pages itself, and where the system setting
// is "madvise" (/sys/kernel/mm/transparent_hugepage/enabled, a common default) memory gets
// them only when asked. So this allocates one block of n bytes without touching it (hugeBlock),
// advises it (MADV_HUGEPAGE marks the mapping, not pages) and frees it: the runtime then carves
// the replay's objects out of the same advised memory, 2 MB a fault. As nothing is touched,
// the advice costs no resident memory until the replay uses it.
//
// It advises nothing when GODEBUG has disablethp=1, Go's own switch to keep huge pages off the
// heap, or when the system charges every mapping against a commit limit (vm.overcommit_memory
// 2), where an untouched block could still fail the allocation, which Go cannot recover from.
// The system settings "never" (no huge pages) and "always" (every mapping gets them) make the
// advice moot, not harmful.
func adviseHugePages(n int) (start, end uintptr) {
	if n < hugePage || strings.Contains(os.Getenv("GODEBUG"), "disablethp=1") || strictOvercommit() {
		return 0, 0
	}
	block, err := hugeBlock(n)
	start = uintptr(unsafe.Pointer(unsafe.SliceData(block)))
	// block is not used past here: this collects it and hands its pages back to the system,
	// untouched, so that they count against no memory limit until the replay's objects use them.
	// A block the system would not advise goes back too, rather than wait for a collection.
	debug.FreeOSMemory()
	if err != nil {
		return 0, 0
	}
	return start, start + uintptr(n)
}

// hugeBlock allocates n bytes of the heap without touching them (but the first byte) and
// advises them for huge pages.
//
// A make would clear the block whenever any of it was heap memory used before, faulting in
// every page (a gigabyte took 2 s of CPU), and the runtime cannot be told not to. A
// strings.Builder grows its buffer without clearing it, so its Grow allocates the block, and
// one byte written gives its address.
func hugeBlock(n int) ([]byte, error) {
	var b strings.Builder
	b.Grow(n)
	b.WriteByte(0)
	block := unsafe.Slice(unsafe.StringData(b.String()), n)
	// A large object's span starts on a page boundary and spans whole pages, as madvise needs.
	return block, syscall.Madvise(block, syscall.MADV_HUGEPAGE)
}

// strictOvercommit reports whether the system refuses memory beyond its commit limit
// (vm.overcommit_memory 2) rather than when it is touched.
func strictOvercommit() bool {
	b, err := os.ReadFile("/proc/sys/vm/overcommit_memory")
	return err == nil && strings.TrimSpace(string(b)) == "2"
}
