// Package accesslog reads gateway access logs into Records for the simulator: Envoy JSON access
// logs (and any JSON-lines log through a field mapping), Envoy's default text format, and CSV
// with a header row. Gzip input is detected by its magic bytes.
//
// Readers stream: one Record at a time, with memory bounded by the longest line. A line that
// cannot be parsed is returned as a *LineError carrying its file and line number, and reading
// continues with the next line; any other error ends the read.
//
// Reading and parsing can be split across goroutines: Reader.ReadRaw returns the next raw line
// and its number, cheaply and in order, and any number of Parsers (Reader.NewParser), one per
// goroutine, turn lines into the Records that Read would have returned. Read and ReadArena are
// ReadRaw and a Parser of the Reader's own.
//
// A Record's strings are substrings of one string per line, so reading a JSON line costs one
// allocation plus one per escaped value (a CSV line, encoding/csv's); with Reader.ReadArena they view a buffer the caller
// reuses, and the line costs none. Callers that keep a value beyond the record (a map key, say)
// should strings.Clone it: for memory, and with ReadArena for correctness.
package accesslog

import (
	"strconv"
	"strings"
	"time"
)

// Record is one request from an access log. Missing values are empty (Envoy's "-" reads as
// empty); TimeMs is Unix milliseconds, and a line without a timestamp is a bad line, not a
// record.
type Record struct {
	// File and Line locate the record in its log (Line is 1-based).
	File string
	Line int64

	TimeMs     int64
	Method     string
	Path       string
	Protocol   string
	Status     int
	Authority  string
	UserAgent  string
	RequestID  string
	Upstream   string
	XFF        string // X-Forwarded-For as logged; see ClientIP
	RemoteAddr string // downstream remote address as logged, possibly with a port

	// Headers holds the requested headers (Options.Headers) that the log carried, by
	// lower-case name.
	Headers []Header
}

// Header is one request header (or other captured attribute) of a Record.
type Header struct {
	Name  string // lower case
	Value string
}

// Header returns the value of header name (lower case) and whether the record carried it.
func (r *Record) Header(name string) (string, bool) {
	for i := range r.Headers {
		if r.Headers[i].Name == name {
			return r.Headers[i].Value, true
		}
	}
	return "", false
}

// ClientIP is the client's address without a port, as Envoy's remote_address rate-limit action
// sees it: the downstream remote address when the log has one (%DOWNSTREAM_REMOTE_ADDRESS%, the
// address Envoy trusts), else the rightmost X-Forwarded-For entry, the one the edge proxy
// appended (Envoy's default xff_num_trusted_hops of 0). Entries left of it are whatever the
// client sent, so they are never used. It is empty when neither is known.
func (r *Record) ClientIP() string {
	if r.RemoteAddr != "" {
		return stripPort(trimSpace(r.RemoteAddr))
	}
	x := r.XFF
	for i := len(x) - 1; i >= 0; i-- {
		if x[i] == ',' {
			x = x[i+1:]
			break
		}
	}
	return stripPort(trimSpace(x))
}

// Field returns the value of a named field as text: a well-known field name (FieldNames;
// start_time as RFC 3339 UTC with milliseconds, response_code in decimal and empty when it is 0,
// as it is when the line has none), client_ip (ClientIP), or a captured header.
func (r *Record) Field(name string) string {
	switch fieldByName[name] {
	case fieldTime:
		if r.TimeMs == noTimestamp {
			return ""
		}
		return time.UnixMilli(r.TimeMs).UTC().Format("2006-01-02T15:04:05.000Z07:00")
	case fieldStatus:
		if r.Status == 0 {
			return ""
		}
		return strconv.Itoa(r.Status)
	case fieldMethod:
		return r.Method
	case fieldPath:
		return r.Path
	case fieldProtocol:
		return r.Protocol
	case fieldAuthority:
		return r.Authority
	case fieldUserAgent:
		return r.UserAgent
	case fieldRequestID:
		return r.RequestID
	case fieldUpstream:
		return r.Upstream
	case fieldXFF:
		return r.XFF
	case fieldRemote:
		return r.RemoteAddr
	case fieldClientIP:
		return r.ClientIP()
	}
	v, _ := r.Header(name)
	return v
}

// reset empties r for the next line, keeping its header slice. TimeMs is noTimestamp until a
// timestamp is read.
func (r *Record) reset() {
	h := r.Headers[:0]
	*r = Record{TimeMs: noTimestamp, Headers: h}
}

// stripPort removes a trailing ":port" from an IPv4 address or host name and the brackets and port
// from "[v6]:port". A bare IPv6 address is returned unchanged.
func stripPort(a string) string {
	if a == "" {
		return a
	}
	if a[0] == '[' {
		for i := 1; i < len(a); i++ {
			if a[i] == ']' {
				return a[1:i]
			}
		}
		return a
	}
	colon := strings.IndexByte(a, ':')
	if colon < 0 || strings.IndexByte(a[colon+1:], ':') >= 0 {
		return a // no port, or two colons: a bare IPv6 address
	}
	return a[:colon]
}

func trimSpace(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t' || s[len(s)-1] == '\r') {
		s = s[:len(s)-1]
	}
	return s
}
