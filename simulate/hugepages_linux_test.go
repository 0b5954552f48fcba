package simulate

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
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

// hugeBlock leaves its block as it finds it, even where the heap memory it is given was used
// before: a make would clear that memory, and with it the whole block, faulting in every page.
// It runs in a fresh process, which other tests' advice and released memory have not reached,
// with the collector off (so that the scavenger hands nothing back): there, after four blocks
// of the same size are written and collected, the lowest free run that fits is theirs.
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
	var over, cleared int
	line := lastLine(string(out), "huge block:")
	if _, err := fmt.Sscanf(line, "huge block: over=%d cleared=%d", &over, &cleared); err != nil {
		t.Fatalf("child printed no result: %v\n%s", err, out)
	}
	if over == 0 {
		t.Fatalf("the block did not land on the written memory, so this proves nothing:\n%s", out)
	}
	if cleared != 0 {
		t.Errorf("hugeBlock cleared %d of the %d bytes it was given over written memory; want 0 (untouched)", cleared, over)
	}
}

// hugeBlockChild prints how many bytes of a hugeBlock lie over memory written with a pattern
// before, and how many of those no longer hold it.
func hugeBlockChild() {
	const n, pattern = 16 << 20, 0xa5
	debug.SetGCPercent(-1)
	type span struct{ lo, hi uintptr }
	var written []span
	var used [][]byte
	for range 4 {
		b := make([]byte, n)
		for i := range b {
			b[i] = pattern
		}
		p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
		written = append(written, span{p, p + n})
		used = append(used, b)
	}
	runtime.KeepAlive(used) // the four are written before any is freed: distinct memory
	runtime.GC()
	block, err := hugeBlock(n)
	if err != nil {
		fmt.Println("hugeBlock:", err)
		os.Exit(1)
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(block)))
	over, cleared := 0, 0
	for i := 1; i < len(block); i++ { // hugeBlock writes the first byte
		a := base + uintptr(i)
		for _, w := range written {
			if w.lo <= a && a < w.hi {
				over++
				if block[i] != pattern {
					cleared++
				}
				break
			}
		}
	}
	fmt.Printf("huge block: over=%d cleared=%d\n", over, cleared)
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
