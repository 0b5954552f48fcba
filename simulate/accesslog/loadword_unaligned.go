//go:build (amd64 || arm64 || 386 || ppc64le || s390x) && !purego

package accesslog

import "unsafe"

// loadWord is the eight bytes of s from i (i+8 <= len(s)) as one load, in the machine's byte
// order, on the processors that load a word from any address. stringWord is the same load
// (little-endian) but costs too much to inline where a few comparisons need it
// (keyTarget.atShort). Words compared with each other must both come from loadWord.
func loadWord(s string, i int) uint64 {
	return *(*uint64)(unsafe.Add(unsafe.Pointer(unsafe.StringData(s)), i))
}
