package accesslog

import (
	"errors"
	"fmt"
	"strings"
)

// EnvoyTextFormat is Envoy's documented default access-log format, the one parseText reads.
const EnvoyTextFormat = `[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%" ` +
	`%RESPONSE_CODE% %RESPONSE_FLAGS% %BYTES_RECEIVED% %BYTES_SENT% %DURATION% ` +
	`%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% "%REQ(X-FORWARDED-FOR)%" "%REQ(USER-AGENT)%" ` +
	`"%REQ(X-REQUEST-ID)%" "%REQ(:AUTHORITY)%" "%UPSTREAM_HOST%"` + "\n"

var errText = errors.New("not Envoy's default text format")

// parseText reads one line of EnvoyTextFormat. Envoy does not escape quotes inside the quoted
// fields, so the trailing quoted fields are split from the right and the user agent, the field
// most likely to contain a quote, takes whatever is left between.
func parseText(line string, rec *Record) error {
	if len(line) < 2 || line[0] != '[' {
		return fmt.Errorf("%w: want [START_TIME]", errText)
	}
	end := strings.IndexByte(line, ']')
	if end < 0 {
		return fmt.Errorf("%w: unterminated [START_TIME]", errText)
	}
	ms, err := parseTime(line[1:end])
	if err != nil {
		return err
	}
	rec.TimeMs = ms
	rest := line[end+1:]
	if !strings.HasPrefix(rest, ` "`) {
		return fmt.Errorf("%w: want a quoted request line", errText)
	}
	rest = rest[2:]
	q := strings.IndexByte(rest, '"')
	if q < 0 {
		return fmt.Errorf("%w: unterminated request line", errText)
	}
	reqLine := rest[:q]
	rest = rest[q+1:]
	method, after, ok := strings.Cut(reqLine, " ")
	if !ok {
		return fmt.Errorf("%w: request line %q: want METHOD PATH PROTOCOL", errText, reqLine)
	}
	path, proto, _ := strings.Cut(after, " ")
	rec.Method, rec.Path, rec.Protocol = dash(method), dash(path), dash(proto)

	// Six unquoted fields: code, flags, bytes received, bytes sent, duration, upstream time.
	for i := 0; i < 6; i++ {
		if !strings.HasPrefix(rest, " ") {
			return fmt.Errorf("%w: want six fields after the request line", errText)
		}
		rest = rest[1:]
		sp := strings.IndexByte(rest, ' ')
		if sp < 0 {
			return fmt.Errorf("%w: want six fields after the request line", errText)
		}
		if i == 0 {
			if tok := rest[:sp]; tok != "-" {
				n, err := atoi(tok)
				if err != nil {
					return fmt.Errorf("response code %q: not a number", tok)
				}
				rec.Status = n
			}
		}
		rest = rest[sp:]
	}
	rest = strings.TrimPrefix(rest, " ")
	if len(rest) < 2 || rest[0] != '"' || rest[len(rest)-1] != '"' {
		return fmt.Errorf("%w: want five quoted fields at the end", errText)
	}
	parts := strings.Split(rest[1:len(rest)-1], `" "`)
	n := len(parts)
	if n < 5 {
		return fmt.Errorf("%w: want five quoted fields at the end, got %d", errText, n)
	}
	rec.XFF = dash(parts[0])
	rec.UserAgent = dash(strings.Join(parts[1:n-3], `" "`))
	rec.RequestID = dash(parts[n-3])
	rec.Authority = dash(parts[n-2])
	rec.Upstream = dash(parts[n-1])
	return nil
}

func dash(s string) string {
	if s == "-" {
		return ""
	}
	return s
}
