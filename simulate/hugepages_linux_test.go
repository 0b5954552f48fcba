package simulate

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
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
