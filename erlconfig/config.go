// Package erlconfig owns envoyproxy/ratelimit's configuration: its YAML documents, their
// conversion from the compiled policy model, and their import as CUE policy.
//
// envoyproxy/ratelimit (ERL, the reference rate limit service) reads one YAML document per domain:
// a tree of descriptors, each with a key, an optional value (a trailing '*' makes it a prefix
// wildcard) and an optional rate_limit of requests per unit, where the unit is a second, minute,
// hour, day, week (7 days), month (30 days) or year (365 days). It counts in fixed windows
// aligned to the Unix epoch, as rlctl's fixed_window algorithm does, and it matches descriptors as
// policy.Domain.Lookup does.
//
//   - FromModel converts a compiled model into one Config per domain. A rule that is a
//     fixed_window, has one limit whose window is one whole unit, is in the enforce stage and has
//     no sub-shards converts exactly; anything else converts to the nearest equivalent and a Note
//     says what was approximated (see FromModel).
//   - Config.Proto gives the xDS resource ERL subscribes to (CONFIG_TYPE=GRPC_XDS_SOTW).
//   - Parse reads ERL's YAML strictly, with every position; Import turns parsed configs into CUE
//     policy files.
package erlconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.yaml.in/yaml/v3"

	"github.com/rlctl/rlctl/policy"
)

// Config is one ERL configuration document: the descriptors of one domain. Field order is the
// order the YAML and JSON encodings write.
type Config struct {
	Domain      string       `yaml:"domain" json:"domain"`
	Descriptors []Descriptor `yaml:"descriptors" json:"descriptors"`

	// Pos is where Parse found the document (its domain key); zero for a converted model.
	Pos policy.Pos `yaml:"-" json:"-"`
}

// Descriptor is one level of ERL's descriptor tree. An empty Value matches any value of Key; a
// Value ending in '*' matches the values with that prefix (a '*' elsewhere is a literal
// character).
type Descriptor struct {
	Key       string     `yaml:"key" json:"key"`
	Value     string     `yaml:"value,omitempty" json:"value,omitempty"`
	RateLimit *RateLimit `yaml:"rate_limit,omitempty" json:"rate_limit,omitempty"`
	// ShadowMode: ERL counts the request but always answers OK.
	ShadowMode bool `yaml:"shadow_mode,omitempty" json:"shadow_mode,omitempty"`
	// QuotaMode: ERL answers OK for a request over the limit and reports the violation in the
	// response's dynamic metadata.
	QuotaMode bool `yaml:"quota_mode,omitempty" json:"quota_mode,omitempty"`
	// DetailedMetric, ValueToMetric and ShareThreshold are read by Parse so that Import can
	// refuse them; FromModel never sets them. ShareThreshold makes every value of a wildcard share
	// one counter. The xDS resource has no field for ValueToMetric and ShareThreshold.
	DetailedMetric bool         `yaml:"detailed_metric,omitempty" json:"detailed_metric,omitempty"`
	ValueToMetric  bool         `yaml:"value_to_metric,omitempty" json:"value_to_metric,omitempty"`
	ShareThreshold bool         `yaml:"share_threshold,omitempty" json:"share_threshold,omitempty"`
	Descriptors    []Descriptor `yaml:"descriptors,omitempty" json:"descriptors,omitempty"`

	// Pos is where Parse found the descriptor (its first key); Fields holds the position of each
	// key Parse read, by name. Both are zero for a converted model.
	Pos    policy.Pos            `yaml:"-" json:"-"`
	Fields map[string]policy.Pos `yaml:"-" json:"-"`
}

// RateLimit is a descriptor's limit: RequestsPerUnit requests per Unit, or no limit at all when
// Unlimited (then Unit is empty).
type RateLimit struct {
	Unit            Unit      `yaml:"unit,omitempty" json:"unit,omitempty"`
	RequestsPerUnit uint32    `yaml:"requests_per_unit" json:"requests_per_unit"`
	Name            string    `yaml:"name,omitempty" json:"name,omitempty"`
	Unlimited       bool      `yaml:"unlimited,omitempty" json:"unlimited,omitempty"`
	Replaces        []Replace `yaml:"replaces,omitempty" json:"replaces,omitempty"`

	Pos    policy.Pos            `yaml:"-" json:"-"`
	Fields map[string]policy.Pos `yaml:"-" json:"-"`
}

// Replace names a limit that a request's other matching limit replaces.
type Replace struct {
	Name string     `yaml:"name" json:"name"`
	Pos  policy.Pos `yaml:"-" json:"-"`
}

// Unit is ERL's rate limit unit, written in lower case.
type Unit string

// The units ERL knows. A week is 7 days, a month 30 days and a year 365 days.
const (
	Second Unit = "second"
	Minute Unit = "minute"
	Hour   Unit = "hour"
	Day    Unit = "day"
	Week   Unit = "week"
	Month  Unit = "month"
	Year   Unit = "year"
)

// units are ERL's units, shortest first, with their length and the policy window that writes
// one of them.
var units = []struct {
	unit   Unit
	ms     int64
	window string
	proto  rlsconfv3.RateLimitUnit
}{
	{Second, 1000, "1s", rlsconfv3.RateLimitUnit_SECOND},
	{Minute, 60 * 1000, "1m", rlsconfv3.RateLimitUnit_MINUTE},
	{Hour, 3600 * 1000, "1h", rlsconfv3.RateLimitUnit_HOUR},
	{Day, 86400 * 1000, "1d", rlsconfv3.RateLimitUnit_DAY},
	{Week, 7 * 86400 * 1000, "7d", rlsconfv3.RateLimitUnit_WEEK},
	{Month, 30 * 86400 * 1000, "30d", rlsconfv3.RateLimitUnit_MONTH},
	{Year, 365 * 86400 * 1000, "365d", rlsconfv3.RateLimitUnit_YEAR},
}

// ParseUnit returns the unit named s, in any case, as ERL's loader reads it: the unit whose name
// in upper case is strings.ToUpper(s), so that "mınute", with a dotless i, is a minute.
func ParseUnit(s string) (Unit, bool) {
	s = strings.ToUpper(s)
	for _, u := range units {
		if s == strings.ToUpper(string(u.unit)) {
			return u.unit, true
		}
	}
	return "", false
}

// Millis returns the unit's length in milliseconds, or 0 for an unknown unit.
func (u Unit) Millis() int64 {
	for _, x := range units {
		if x.unit == u {
			return x.ms
		}
	}
	return 0
}

// Format names an encoding of a Config.
type Format string

// The encodings. ERL's loader reads either: JSON is YAML too.
const (
	YAML Format = "yaml"
	JSON Format = "json"
)

// Marshal encodes c as a YAML document (two-space indents, keys in a fixed order, a comment
// naming the domain) or as indented JSON. The same Config always gives the same bytes.
func (c Config) Marshal(f Format) ([]byte, error) {
	if c.Descriptors == nil {
		c.Descriptors = []Descriptor{}
	}
	switch f {
	case JSON:
		b, err := json.MarshalIndent(c, "", "  ")
		if err != nil {
			return nil, err
		}
		return append(escapeForYAML(b), '\n'), nil
	case YAML:
		var buf bytes.Buffer
		fmt.Fprintf(&buf, "# envoyproxy/ratelimit configuration of domain %s, rendered by rlctl from its policy.\n", c.Domain)
		buf.WriteString("# Do not edit: change the policy and render again.\n")
		enc := yaml.NewEncoder(&buf)
		enc.SetIndent(2)
		if err := enc.Encode(c); err != nil {
			return nil, err
		}
		if err := enc.Close(); err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	}
	return nil, fmt.Errorf("erlconfig: unknown format %q", f)
}

// escapeForYAML escapes, as \uXXXX, the characters that encoding/json writes as they are but
// that a YAML reader such as ERL's does not read back as written: U+0085 (NEL), which it reads as
// a line break, and DEL, the C1 controls, U+FEFF, U+FFFE and U+FFFF, which it refuses. JSON holds
// them only inside strings, where the escape means the same character.
func escapeForYAML(b []byte) []byte {
	var out []byte
	done := 0
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == 0x7f || (r >= 0x80 && r <= 0x9f) || r == 0xfeff || r == 0xfffe || r == 0xffff {
			out = fmt.Appendf(append(out, b[done:i]...), `\u%04x`, r)
			done = i + n
		}
		i += n
	}
	if out == nil {
		return b
	}
	return append(out, b[done:]...)
}

// Proto returns c as the xDS resource that ERL loads with CONFIG_TYPE=GRPC_XDS_SOTW, named after
// the domain, and a Note for each limit it serves otherwise than the YAML would. ValueToMetric
// and ShareThreshold have no field there and are not carried; a Config from FromModel never sets
// them.
//
// ERL's xDS loader carries shadow_mode but drops quota_mode (its config_xds.go), so a limit in
// quota_mode would be enforced: such a descriptor is sent with shadow_mode set as well, which
// admits a request over the limit as quota_mode does, and counts it in ERL's stats rather than
// in the response's dynamic metadata.
func (c Config) Proto() (*rlsconfv3.RateLimitConfig, []Note) {
	var notes []Note
	return &rlsconfv3.RateLimitConfig{
		Name:        c.Domain,
		Domain:      c.Domain,
		Descriptors: protoDescriptors(c.Domain, c.Descriptors, &notes),
	}, notes
}

func protoDescriptors(domain string, ds []Descriptor, notes *[]Note) []*rlsconfv3.RateLimitDescriptor {
	if len(ds) == 0 {
		return nil
	}
	out := make([]*rlsconfv3.RateLimitDescriptor, len(ds))
	for i, d := range ds {
		if d.QuotaMode && !d.ShadowMode {
			rule := ""
			if d.RateLimit != nil {
				rule = d.RateLimit.Name
			}
			*notes = append(*notes, Note{Severity: Approximation, Domain: domain, Rule: rule,
				Message: "quota_mode served over xDS as shadow_mode: ERL's xDS loader drops quota_mode, and would enforce the limit without it"})
		}
		pd := &rlsconfv3.RateLimitDescriptor{
			Key:            d.Key,
			Value:          d.Value,
			ShadowMode:     d.ShadowMode || d.QuotaMode,
			QuotaMode:      d.QuotaMode,
			DetailedMetric: d.DetailedMetric,
			Descriptors:    protoDescriptors(domain, d.Descriptors, notes),
		}
		if rl := d.RateLimit; rl != nil {
			pd.RateLimit = &rlsconfv3.RateLimitPolicy{
				Unit:            rl.Unit.proto(),
				RequestsPerUnit: rl.RequestsPerUnit,
				Unlimited:       rl.Unlimited,
				Name:            rl.Name,
			}
			for _, r := range rl.Replaces {
				pd.RateLimit.Replaces = append(pd.RateLimit.Replaces, &rlsconfv3.RateLimitReplace{Name: r.Name})
			}
		}
		out[i] = pd
	}
	return out
}

func (u Unit) proto() rlsconfv3.RateLimitUnit {
	for _, x := range units {
		if x.unit == u {
			return x.proto
		}
	}
	return rlsconfv3.RateLimitUnit_UNKNOWN
}
