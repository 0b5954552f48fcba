package accesslog

import "unsafe"

// CopyTo makes dst a copy of r whose strings view *arena instead of what r's strings view:
// a caller that reads records ahead of their use (merging logs by time, say) can then reuse the
// buffer it read r with. The arena is used as ReadArena uses it: appended to, with a new buffer
// started when the strings do not fit, and valid until the caller reuses it. dst's Headers
// slice is reused.
func (r *Record) CopyTo(dst *Record, arena *[]byte) {
	n := len(r.Method) + len(r.Path) + len(r.Protocol) + len(r.Authority) + len(r.UserAgent) +
		len(r.RequestID) + len(r.Upstream) + len(r.XFF) + len(r.RemoteAddr)
	for _, h := range r.Headers {
		n += len(h.Name) + len(h.Value)
	}
	if cap(*arena)-len(*arena) < n {
		*arena = make([]byte, 0, max(arenaChunk, n))
	}
	str := func(s string) string {
		if s == "" {
			return ""
		}
		at := len(*arena)
		*arena = append(*arena, s...)
		return unsafe.String(unsafe.SliceData((*arena)[at:]), len(s))
	}
	headers := dst.Headers[:0]
	*dst = Record{
		File: r.File, Line: r.Line, TimeMs: r.TimeMs, Status: r.Status,
		Method: str(r.Method), Path: str(r.Path), Protocol: str(r.Protocol),
		Authority: str(r.Authority), UserAgent: str(r.UserAgent), RequestID: str(r.RequestID),
		Upstream: str(r.Upstream), XFF: str(r.XFF), RemoteAddr: str(r.RemoteAddr),
	}
	for _, h := range r.Headers {
		headers = append(headers, Header{Name: str(h.Name), Value: str(h.Value)})
	}
	dst.Headers = headers
}
