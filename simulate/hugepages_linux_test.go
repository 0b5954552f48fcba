package simulate

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"unsafe"
)

// adviseHugePages leaves the block it advised marked for huge pages ("hg" among the mapping's
// VmFlags in /proc/self/smaps) after the collector has freed it, whatever the system's setting,
// and advises nothing with GODEBUG=disablethp=1.
func TestAdviseHugePages(t *testing.T) {
	start, end := adviseHugePages(8 << 20)
	if start == 0 || end != start+8<<20 {
		t.Fatalf("adviseHugePages(8 MB) advised [%#x, %#x); want 8 MB", start, end)
	}
	for _, addr := range []uintptr{start, end - 1} {
		flags, err := vmFlagsAt(addr)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(" "+flags+" ", " hg ") {
			t.Errorf("the mapping at %#x has VmFlags %q; want hg (MADV_HUGEPAGE) among them", addr, flags)
		}
	}

	t.Setenv("GODEBUG", "disablethp=1")
	if start, end := adviseHugePages(8 << 20); start != 0 || end != 0 {
		t.Errorf("with GODEBUG=disablethp=1 adviseHugePages advised [%#x, %#x); want nothing", start, end)
	}
}

// hugeBlock leaves its block untouched even where the heap memory it is given was used before,
// which a make would clear, faulting in the fresh pages beyond. It runs in a fresh process,
// which the advice of other tests has not reached: there an earlier 64 MB slice, written and
// collected (its pages free but still resident), then 64 MB of fresh memory are the first free
// run of 128 MB, so the block lands on both.
func TestHugeBlockTouchesNothing(t *testing.T) {
	if os.Getenv("RLCTL_HUGE_BLOCK_CHILD") == "1" {
		hugeBlockChild()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHugeBlockTouchesNothing$")
	cmd.Env = append(os.Environ(), "RLCTL_HUGE_BLOCK_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var overlap, faults int
	line := lastLine(string(out), "huge block:")
	if _, err := fmt.Sscanf(line, "huge block: overlap=%d faults=%d", &overlap, &faults); err != nil {
		t.Fatalf("child printed no result: %v\n%s", err, out)
	}
	if overlap == 0 {
		t.Fatalf("the block did not land on the used memory, so this proves nothing:\n%s", out)
	}
	// Clearing the block would fault its fresh 64 MB in, 16,384 pages of 4 KB.
	if faults > 1000 {
		t.Errorf("hugeBlock(128 MB) over used memory took %d page faults; want few (untouched)", faults)
	}
}

func hugeBlockChild() {
	const n = 64 << 20
	used := make([]byte, n)
	for i := range used {
		used[i] = 1
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(used)))
	used = nil
	runtime.GC()
	before := minorFaults()
	block, err := hugeBlock(2 * n)
	faults := minorFaults() - before
	if err != nil {
		fmt.Println("hugeBlock:", err)
		os.Exit(1)
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(block)))
	overlap := 0
	if p < lo+n && lo < p+2*n {
		overlap = 1
	}
	fmt.Printf("huge block: overlap=%d faults=%d\n", overlap, faults)
}

func minorFaults() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return ru.Minflt
}

// lastLine returns the last line of out that starts with prefix, or "".
func lastLine(out, prefix string) string {
	found := ""
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			found = l
		}
	}
	return found
}

// vmFlagsAt returns the VmFlags line of the mapping of this process that holds addr.
func vmFlagsAt(addr uintptr) (string, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return "", err
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x ", &lo, &hi); n == 2 {
			in = lo <= addr && addr < hi
			continue
		}
		if flags, ok := strings.CutPrefix(line, "VmFlags:"); ok && in {
			return strings.TrimSpace(flags), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("no mapping in /proc/self/smaps holds %#x", addr)
}
