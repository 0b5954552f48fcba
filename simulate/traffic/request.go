package traffic

import (
	"strconv"
	"time"
)

// Request is one generated request, as an access log records it.
type Request struct {
	TimeMs        int64
	Method        string
	Path          string
	Protocol      string
	Status        int
	BytesReceived int
	BytesSent     int
	Duration      int
	ClientIP      string
	UserAgent     string
	RequestID     string
	Authority     string
	Upstream      string
	Gateway       string // the gateway node that logged the request (JSON key "hostname")
	Tenant        string // x-tenant-id
	Authorization string
	APIKey        string // x-api-key
	JA4           string // x-ja4
}

// AppendJSON appends r as one Envoy JSON access-log line, with the keys Envoy's documentation
// and Istio use and the request headers under their own names.
func (r *Request) AppendJSON(b []byte) []byte {
	b = append(b, `{"start_time":"`...)
	b = appendTime(b, r.TimeMs)
	b = append(b, '"')
	b = appendField(b, "method", r.Method)
	b = appendField(b, "path", r.Path)
	b = appendField(b, "protocol", r.Protocol)
	b = append(b, `,"response_code":`...)
	b = strconv.AppendInt(b, int64(r.Status), 10)
	b = appendField(b, "response_flags", "-")
	b = append(b, `,"bytes_received":`...)
	b = strconv.AppendInt(b, int64(r.BytesReceived), 10)
	b = append(b, `,"bytes_sent":`...)
	b = strconv.AppendInt(b, int64(r.BytesSent), 10)
	b = append(b, `,"duration":`...)
	b = strconv.AppendInt(b, int64(r.Duration), 10)
	b = appendField(b, "x_forwarded_for", r.ClientIP)
	b = appendField(b, "user_agent", r.UserAgent)
	b = appendField(b, "request_id", r.RequestID)
	b = appendField(b, "authority", r.Authority)
	b = appendField(b, "upstream_host", r.Upstream)
	b = appendField(b, "downstream_remote_address", r.ClientIP+":"+strconv.Itoa(r.remotePort()))
	b = appendField(b, "hostname", r.Gateway)
	b = appendField(b, "x-tenant-id", r.Tenant)
	b = appendField(b, "authorization", r.Authorization)
	b = appendField(b, "x-api-key", r.APIKey)
	b = appendField(b, "x-ja4", r.JA4)
	return append(b, "}\n"...)
}

// AppendText appends r in Envoy's default text access-log format. That format carries no
// tenant, credential or fingerprint headers, so only address-based rules see these lines.
func (r *Request) AppendText(b []byte) []byte {
	b = append(b, '[')
	b = appendTime(b, r.TimeMs)
	b = append(b, `] "`...)
	b = append(b, r.Method...)
	b = append(b, ' ')
	b = append(b, r.Path...)
	b = append(b, ' ')
	b = append(b, r.Protocol...)
	b = append(b, `" `...)
	b = strconv.AppendInt(b, int64(r.Status), 10)
	b = append(b, " - "...)
	b = strconv.AppendInt(b, int64(r.BytesReceived), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(r.BytesSent), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(r.Duration), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(max(r.Duration-1, 0)), 10)
	for _, v := range [...]string{r.ClientIP, r.UserAgent, r.RequestID, r.Authority, r.Upstream} {
		b = append(b, ` "`...)
		b = append(b, dash(v)...)
		b = append(b, '"')
	}
	return append(b, '\n')
}

// remotePort is the client's source port in the downstream remote address.
func (r *Request) remotePort() int {
	return 20000 + int(r.TimeMs%40000)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// appendField appends ,"key":"value" unless value is empty. Values are escaped for JSON.
func appendField(b []byte, key, value string) []byte {
	if value == "" {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, key...)
	b = append(b, `":`...)
	return appendString(b, value)
}

// appendString appends value as a JSON string.
func appendString(b []byte, value string) []byte {
	b = append(b, '"')
	for i := 0; i < len(value); i++ {
		switch c := value[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, `\u00`...)
			b = append(b, "0123456789abcdef"[c>>4], "0123456789abcdef"[c&15])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// appendTime appends ms as Envoy's START_TIME, 2024-05-01T12:00:00.123Z.
func appendTime(b []byte, ms int64) []byte {
	return time.UnixMilli(ms).UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z")
}
