//go:build !linux

package simulate

// adviseHugePages does nothing: the advice it gives on Linux (hugepages_linux.go) has no
// portable equivalent.
func adviseHugePages(n int) (start, end uintptr) { return 0, 0 }
