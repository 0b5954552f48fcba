package accesslog

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

type field uint8

const (
	fieldNone field = iota
	fieldTime
	fieldMethod
	fieldPath
	fieldProtocol
	fieldStatus
	fieldAuthority
	fieldUserAgent
	fieldRequestID
	fieldUpstream
	fieldXFF
	fieldRemote
	fieldClientIP // derived; not read from logs
	fieldHeader   // a captured header; the target carries its name
)

// The well-known field names, as Envoy's documented JSON access-log examples spell them.
var fieldByName = map[string]field{
	"start_time":                fieldTime,
	"method":                    fieldMethod,
	"path":                      fieldPath,
	"protocol":                  fieldProtocol,
	"response_code":             fieldStatus,
	"authority":                 fieldAuthority,
	"user_agent":                fieldUserAgent,
	"request_id":                fieldRequestID,
	"upstream_host":             fieldUpstream,
	"x_forwarded_for":           fieldXFF,
	"downstream_remote_address": fieldRemote,
	"client_ip":                 fieldClientIP,
}

// defaultKeys are the log keys (JSON keys, CSV columns) each well-known field is read from
// unless a mapping says otherwise: Envoy's and Istio's names first, then common JSON-lines names.
// When a record has several of a field's keys, the first non-empty one in this order wins,
// wherever it is in the line: the path before a router rewrite (x-envoy-original-path, the
// one the rate limit filter saw), the trusted downstream address before the direct peer.
var defaultKeys = map[field][]string{
	fieldTime:      {"start_time", "timestamp", "time", "ts", "@timestamp"},
	fieldMethod:    {"method", ":method", "request_method"},
	fieldPath:      {"x-envoy-original-path", "path", ":path", "request_path", "uri"},
	fieldProtocol:  {"protocol"},
	fieldStatus:    {"response_code", "status", "status_code", "code"},
	fieldAuthority: {"authority", ":authority", "host"},
	fieldUserAgent: {"user_agent", "user-agent", "useragent"},
	fieldRequestID: {"request_id", "x-request-id", "x_request_id"},
	fieldUpstream:  {"upstream_host"},
	fieldXFF:       {"x_forwarded_for", "x-forwarded-for", "forwarded_for"},
	fieldRemote: {"downstream_remote_address", "downstream_direct_remote_address", "client_ip",
		"remote_addr", "remote_address", "ip"},
}

// headerKeys are the default keys that are request header names. Like the captured headers'
// keys, they match a log key in any case: Envoy JSON formats often spell a header as the
// request did (X-Forwarded-For), and HTTP header names are case-insensitive.
var headerKeys = map[string]bool{
	":method": true, ":path": true, "x-envoy-original-path": true, ":authority": true, "host": true,
	"user-agent": true, "x-request-id": true, "x-forwarded-for": true,
}

// FieldNames lists the well-known field names that --field accepts on its left-hand side;
// any other name is a request header.
func FieldNames() []string {
	names := make([]string, 0, len(fieldByName))
	for n, f := range fieldByName {
		if f != fieldClientIP {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// A Mapping says which log key feeds which record field: `NAME=KEY` pairs such as
// "x-tenant-id=tenant" or "start_time=ts". KEY may be a dotted path into nested JSON objects
// ("request.headers.x-tenant-id"). Names that are not well-known fields are header names.
type Mapping map[string]string

// ParseMapping parses --field values of the form NAME=KEY, NAME in any case. A mapping given
// twice counts once. Every bad value is reported, joined (errors.Join).
func ParseMapping(specs []string) (Mapping, error) {
	m := Mapping{}
	var errs []error
	for _, s := range specs {
		name, key, ok := strings.Cut(s, "=")
		name, key = strings.ToLower(strings.TrimSpace(name)), strings.TrimSpace(key)
		if !ok || name == "" || key == "" {
			errs = append(errs, fmt.Errorf("--field %q: want NAME=KEY", s))
			continue
		}
		if fieldByName[name] == fieldClientIP {
			errs = append(errs, fmt.Errorf("--field %q: client_ip is derived; map downstream_remote_address or x_forwarded_for", s))
			continue
		}
		if k, ok := m[name]; ok {
			if k != key {
				// One name is fed by one key: the first mapping would be dropped without a word.
				errs = append(errs, fmt.Errorf("--field %q: %s is already mapped to key %q", s, name, k))
			}
			continue
		}
		if other, ok := keyOwner(m, key); ok {
			// One key feeds one field: the other would stay empty in every record.
			errs = append(errs, fmt.Errorf("--field %q: key %q is already mapped to %s", s, key, other))
			continue
		}
		m[name] = key
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return m, nil
}

// keyOwner returns the name that m maps key to, if any.
func keyOwner(m Mapping, key string) (string, bool) {
	for name, k := range m {
		if k == key {
			return name, true
		}
	}
	return "", false
}

// target is where a log key's value goes.
type target struct {
	f    field
	name string // header name for fieldHeader
	// fold says the key is a header name (lower case) that matches a log key in any case.
	fold bool
	// rank is the key's place among its field's keys (defaultKeys; a mapped key is 0): a
	// value from a lower rank wins.
	rank uint8
	// mapped is 1 + the index of the key's mapping among mappedKeys, or 0 for a default
	// key: parsers note which mapped keys the log has (Reader.Unseen).
	mapped int
}

// mappedKey is one --field mapping: the log key and the NAME=KEY it was given as.
type mappedKey struct{ key, spec string }

// mappedKeys lists m's mappings sorted by key, in the order target.mapped counts.
func mappedKeys(m Mapping) []mappedKey {
	var out []mappedKey
	for name, key := range m {
		out = append(out, mappedKey{key, name + "=" + key})
	}
	slices.SortFunc(out, func(a, b mappedKey) int { return strings.Compare(a.key, b.key) })
	return out
}

// fieldRanks holds the rank of the key each of the current record's values came from: per
// well-known field (unranked before any), and per captured header, in the order of
// Record.Headers. Parsers reset it for each line.
type fieldRanks struct {
	fields  [fieldHeader]uint8
	headers []uint8
}

const unranked = math.MaxUint8

func (r *fieldRanks) reset() {
	for i := range r.fields {
		r.fields[i] = unranked
	}
	r.headers = r.headers[:0]
}

// readFields returns which well-known fields Options.Fields names, all of them for nil.
func readFields(names []string) (read [fieldHeader]bool, err error) {
	for f := range read {
		read[f] = names == nil
	}
	for _, name := range names {
		f, ok := fieldByName[name]
		if !ok || f == fieldClientIP {
			return read, fmt.Errorf("accesslog: %q is not a well-known field (%s)", name, strings.Join(FieldNames(), ", "))
		}
		read[f] = true
	}
	return read, nil
}

// keyTable maps log keys to targets for one reader. Mapped keys replace the defaults of the
// field they name. The default keys of a field read does not mark have a target without a
// field, which the parsers skip, but which keeps a captured header from taking the key.
func keyTable(m Mapping, headers []string, read [fieldHeader]bool) map[string]target {
	t := map[string]target{}
	mapped := map[field]bool{}
	mappedHeader := map[string]bool{}
	index := map[string]int{}
	for i, mk := range mappedKeys(m) {
		index[mk.key] = i + 1
	}
	for name, key := range m {
		if f, ok := fieldByName[name]; ok {
			mapped[f] = true
			t[key] = target{f: f, mapped: index[key]}
			continue
		}
		mappedHeader[name] = true
		t[key] = target{f: fieldHeader, name: name, mapped: index[key]}
	}
	for f, keys := range defaultKeys {
		if mapped[f] {
			continue
		}
		for i, k := range keys {
			if _, taken := t[k]; taken {
				continue
			}
			tg := target{f: f, fold: headerKeys[k], rank: uint8(i)}
			if !read[f] {
				tg = target{fold: headerKeys[k]}
			}
			t[k] = tg
		}
	}
	for _, h := range headers {
		h = strings.ToLower(h)
		if mappedHeader[h] {
			continue
		}
		for i, k := range []string{h, strings.ReplaceAll(h, "-", "_"), "req_" + strings.ReplaceAll(h, "-", "_")} {
			if _, taken := t[k]; !taken {
				t[k] = target{f: fieldHeader, name: h, fold: true, rank: uint8(i)}
			}
		}
	}
	return t
}

// noTimestamp marks a record no timestamp was read into: Record.reset sets it, and the reader
// turns a record that still has it into a bad line. No parsed time is this far from 1970.
const noTimestamp = math.MinInt64

// timeKeys names the log keys a timestamp is read from, for the error of a record without one.
func timeKeys(m Mapping) string {
	if k, ok := m["start_time"]; ok {
		return k
	}
	keys := defaultKeys[fieldTime]
	return strings.Join(keys[:len(keys)-1], ", ") + " or " + keys[len(keys)-1]
}

// set stores value v into rec's field, unless it is empty or the field already has a value
// from a key of lower rank (ranks).
func (tg *target) set(rec *Record, v string, ranks *fieldRanks) error {
	if v == "" || v == "-" {
		return nil
	}
	if tg.f < fieldHeader {
		if tg.rank > ranks.fields[tg.f] {
			return nil
		}
		ranks.fields[tg.f] = tg.rank
	}
	switch tg.f {
	case fieldTime:
		ms, err := parseTime(v)
		if err != nil {
			return err
		}
		rec.TimeMs = ms
	case fieldMethod:
		rec.Method = v
	case fieldPath:
		rec.Path = v
	case fieldProtocol:
		rec.Protocol = v
	case fieldStatus:
		n, err := atoi(v)
		if err != nil {
			return fmt.Errorf("response code %q: not a number", v)
		}
		rec.Status = n
	case fieldAuthority:
		rec.Authority = v
	case fieldUserAgent:
		rec.UserAgent = v
	case fieldRequestID:
		rec.RequestID = v
	case fieldUpstream:
		rec.Upstream = v
	case fieldXFF:
		rec.XFF = v
	case fieldRemote:
		rec.RemoteAddr = v
	case fieldHeader:
		for i := range rec.Headers {
			if rec.Headers[i].Name == tg.name {
				if tg.rank < ranks.headers[i] {
					rec.Headers[i].Value, ranks.headers[i] = v, tg.rank
				}
				return nil
			}
		}
		rec.Headers = append(rec.Headers, Header{Name: tg.name, Value: v})
		ranks.headers = append(ranks.headers, tg.rank)
	}
	return nil
}

// atoi parses a small non-negative decimal integer without allocating.
func atoi(s string) (int, error) {
	if s == "" || len(s) > 9 {
		return 0, strconv.ErrSyntax
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, strconv.ErrSyntax
		}
		n = n*10 + int(c-'0')
	}
	return n, nil
}

// parseTime reads a timestamp: RFC 3339 with any fraction (Envoy's START_TIME is
// 2024-05-01T12:00:00.123Z), or a Unix epoch number whose size says its unit, as Envoy's
// %START_TIME(%s)% and its %s%3f, %s%6f and %s%9f forms write it: seconds (with any fraction)
// below 10^11, milliseconds below 10^14, microseconds below 10^17, nanoseconds above. A time
// outside the years 1970 to 9999 is an error: it would be a typo or a unit the log does not
// say, and replaying it would move the virtual clock to it.
func parseTime(s string) (int64, error) {
	ms, ok := fastRFC3339UTC(s)
	if !ok {
		var err error
		if ms, err = parseTimeSlow(s); err != nil {
			return 0, err
		}
	}
	if ms < 0 || ms > maxTimeMs {
		return 0, fmt.Errorf("time %q: outside the years 1970 to 9999", s)
	}
	return ms, nil
}

// maxTimeMs is the last millisecond of the year 9999.
const maxTimeMs = 253402300799999

func parseTimeSlow(s string) (int64, error) {
	if s != "" && s[0] >= '0' && s[0] <= '9' && !strings.ContainsAny(s, "-:T") {
		if ms, ok := epochMs(s); ok {
			return ms, nil
		}
		f, err := strconv.ParseFloat(s, 64) // an exponent form, such as 1.7145648e9
		if err != nil {
			return 0, fmt.Errorf("time %q: want RFC 3339 or Unix epoch", s)
		}
		switch {
		case f < 1e11:
			return int64(f * 1000), nil
		case f < 1e14:
			return int64(f), nil
		case f < 1e17:
			return int64(f / 1e3), nil
		default:
			return int64(f / 1e6), nil
		}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("time %q: want RFC 3339 or Unix epoch", s)
	}
	return t.UnixMilli(), nil
}

// epochMs reads a Unix epoch of digits with an optional fraction exactly, in milliseconds,
// truncating as RFC 3339 times are (a float64 has too few digits for nanoseconds, and rounds):
// the number of digits before the point gives the unit (see parseTime).
func epochMs(s string) (int64, bool) {
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" || !digits(whole) || !digits(frac) {
		return 0, false
	}
	whole = strings.TrimLeft(whole, "0")
	var ms string
	switch n := len(whole); {
	case n <= 11: // seconds, below 10^11: the fraction's first three digits are milliseconds
		ms = whole + (frac + "000")[:3]
	case n <= 14: // milliseconds
		ms = whole
	case n <= 17: // microseconds
		ms = whole[:n-3]
	default: // nanoseconds
		ms = whole[:n-6]
	}
	if ms = strings.TrimLeft(ms, "0"); ms == "" {
		return 0, true
	}
	v, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return math.MaxInt64, true // out of range: parseTime refuses it
	}
	return v, true
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// fastRFC3339UTC parses YYYY-MM-DDTHH:MM:SS[.fff…]Z without allocating.
func fastRFC3339UTC(s string) (int64, bool) {
	if len(s) < 20 || s[len(s)-1] != 'Z' || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' {
		return 0, false
	}
	c, y2 := twoDigits(s, 0), twoDigits(s, 2)
	mo, d, h, mi, se := twoDigits(s, 5), twoDigits(s, 8), twoDigits(s, 11), twoDigits(s, 14), twoDigits(s, 17)
	if c < 0 || y2 < 0 || mo < 1 || mo > 12 || d < 1 || d > 31 || h < 0 || h > 23 || mi < 0 || mi > 59 || se < 0 || se > 59 {
		return 0, false
	}
	y := c*100 + y2
	if d > 28 && d > monthDays(y, mo) {
		return 0, false // 2025-02-30: the slow path refuses it, as it refuses second 60
	}
	ms := 0
	if s[19] == '.' {
		frac := s[20 : len(s)-1]
		if frac == "" {
			return 0, false
		}
		for i := 0; i < 3; i++ {
			ms *= 10
			if i < len(frac) {
				c := frac[i]
				if c < '0' || c > '9' {
					return 0, false
				}
				ms += int(c - '0')
			}
		}
		for i := 3; i < len(frac); i++ {
			if frac[i] < '0' || frac[i] > '9' {
				return 0, false
			}
		}
	} else if len(s) != 20 {
		return 0, false
	}
	days := daysFromCivil(y, mo, d)
	return ((days*24+int64(h))*60+int64(mi))*60_000 + int64(se)*1000 + int64(ms), true
}

// monthDays is the number of days of month m of year y.
func monthDays(y, m int) int {
	switch m {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// twoDigits is the number the two decimal digits of s at i write, or -1 when they are not two
// digits.
func twoDigits(s string, i int) int {
	a, b := uint(s[i])-'0', uint(s[i+1])-'0'
	if a > 9 || b > 9 {
		return -1
	}
	return int(a*10 + b)
}

// daysFromCivil is the number of days from 1970-01-01 to y-m-d in the proleptic Gregorian
// calendar (Howard Hinnant's algorithm).
func daysFromCivil(y, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return int64(era*146097 + doe - 719468)
}
