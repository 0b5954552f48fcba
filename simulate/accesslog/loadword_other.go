//go:build !(amd64 || arm64 || 386 || ppc64le || s390x) || purego

package accesslog

// loadWord is stringWord where a word may not be loaded from any address.
func loadWord(s string, i int) uint64 { return stringWord(s, i) }
