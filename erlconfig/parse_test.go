package erlconfig_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlctl/rlctl/erlconfig"
	"github.com/rlctl/rlctl/erlconfig/erltest"
	"github.com/rlctl/rlctl/policy"
)

// limits lists a parsed descriptor tree one line per descriptor: its path, then its limit.
func limits(ds []erlconfig.Descriptor, prefix string) []string {
	var out []string
	for _, d := range ds {
		p := prefix + d.Key
		if d.Value != "" {
			p += "=" + d.Value
		}
		switch rl := d.RateLimit; {
		case rl == nil:
			out = append(out, p+": no limit")
		case rl.Unlimited:
			out = append(out, p+": unlimited")
		default:
			out = append(out, fmt.Sprintf("%s: %d/%s", p, rl.RequestsPerUnit, rl.Unit))
		}
		out = append(out, limits(d.Descriptors, p+" > ")...)
	}
	return out
}

// erlLoads reports whether envoyproxy/ratelimit's own loader accepts doc (skipped when its
// checker is not installed).
func erlLoads(t *testing.T, doc string) (bool, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f.yaml"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := erltest.Check(t, dir)
	return err == nil, out
}

// TestParseAsERL: YAML that ERL's loader (gopkg.in/yaml.v2 decoding into its structs) reads is
// read to the same limits, and what it refuses is refused at its file:line:col. Each case was
// checked against ERL's loader, and each is run through its config_check_cmd when installed.
//
// Merge keys (<<) are applied where they stand, as ERL's decoder applies them: a merge after a
// key overrides it, and a rate_limit given twice (by a merge and by the descriptor) is merged
// field by field. They were applied after the mapping's own keys, which always won: the
// descriptor b below was imported as 100 requests a second where ERL allows 5.
func TestParseAsERL(t *testing.T) {
	const head = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: &rl {unit: second, requests_per_unit: 5}\n"
	for _, tc := range []struct {
		name, in string
		want     []string // limits, or the problems when refused
		refused  bool
	}{
		{"merge after a key", head + "  - key: b\n    rate_limit:\n      requests_per_unit: 100\n      <<: *rl\n",
			[]string{"a: 5/second", "b: 5/second"}, false},
		{"merge before a key", head + "  - key: b\n    rate_limit: {<<: *rl, requests_per_unit: 7}\n",
			[]string{"a: 5/second", "b: 7/second"}, false},
		{"merged rate_limit merged field by field", "domain: d\ndescriptors:\n  - &d\n    key: a\n    rate_limit: {unit: second, requests_per_unit: 5}\n" +
			"  - <<: *d\n    key: b\n    rate_limit: {requests_per_unit: 10}\n",
			[]string{"a: 5/second", "b: 10/second"}, false},
		{"merge of a sequence: the first mapping wins", head + "  - key: b\n    rate_limit: {<<: [*rl, {unit: minute}]}\n  - key: c\n    rate_limit: {<<: [{unit: minute}, *rl]}\n",
			[]string{"a: 5/second", "b: 5/second", "c: 5/minute"}, false},
		{"merge of a sequence after a key", head + "  - key: b\n    rate_limit: {unit: hour, <<: [*rl, {unit: minute}]}\n",
			[]string{"a: 5/second", "b: 5/second"}, false},
		{"null after a merged rate_limit", head + "  - <<: {key: b, rate_limit: *rl}\n    rate_limit: ~\n",
			[]string{"a: 5/second", "b: no limit"}, false},
		{"descriptors replaced whole", "domain: d\ndescriptors:\n  - &d\n    key: a\n    descriptors: [{key: x, rate_limit: {unit: second, requests_per_unit: 1}}]\n" +
			"  - <<: *d\n    key: b\n    descriptors: [{key: y, rate_limit: {unit: minute, requests_per_unit: 2}}]\n",
			[]string{"a: no limit", "a > x: 1/second", "b: no limit", "b > y: 2/minute"}, false},
		{"merge after the key overrides it", "domain: d\ndescriptors:\n  - &d\n    key: a\n    rate_limit: {unit: second, requests_per_unit: 5}\n  - key: b\n    <<: *d\n",
			[]string{"duplicate descriptor \"a\": ERL reads it as the one before (it joins key and value with '_'):\n    f.yaml:6:5\n    f.yaml:3:5"}, true},
		{"a rate_limit cleared by a merge", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5}\n    <<: {rate_limit: ~}\n",
			[]string{"a: no limit"}, false},
		// yaml.v2 clears a pointer only for ~, null and an empty value: Null leaves an empty
		// rate_limit, which has no unit.
		{"rate_limit: Null", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: Null\n",
			[]string{"rate_limit has no unit (want second, minute, hour, day, week, month or year):\n    f.yaml:4:17"}, true},
		{"rate_limit: ~ and replaces: ~", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: ~\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: ~}\n  - key: c\n    rate_limit: !!null\n",
			[]string{"a: no limit", "b: 1/second", "c: no limit"}, false},
		// ERL refuses a valid unit beside unlimited, and ignores any other.
		{"unlimited beside an unknown unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: bogus, unlimited: true}\n  - key: b\n    rate_limit: {unit: unknown, unlimited: true}\n",
			[]string{"a: unlimited", "b: unlimited"}, false},
		{"unlimited beside a unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: Second, unlimited: true}\n",
			[]string{"unit \"Second\" beside unlimited: an unlimited limit has no unit:\n    f.yaml:4:24"}, true},
		// ERL upper-cases the unit (strings.ToUpper): a dotless i is an I.
		{"unit in upper case", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: m\u0131nute, requests_per_unit: 5}\n",
			[]string{"a: 5/minute"}, false},
		// The non-specific tag makes a plain scalar a string in yaml.v2.
		{"non-specific tag", "domain: d\ndescriptors:\n  - key: a\n    value: ! 1.5\n    rate_limit: {unit: second, requests_per_unit: 5}\n" +
			"  - key: b\n    value: &v ! 18446744073709551615\n  - key: c\n    value: ! ~\n  - ! <<: {key: e}\n    value: ! .inf\n",
			[]string{"a=1.5: 5/second", "b=18446744073709551615: no limit", "c=~: no limit", "e=.inf: no limit"}, false},
		{"non-specific tag on a number", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: ! 5}\n",
			[]string{"requests_per_unit must be a whole number from 0 to 4294967295:\n    f.yaml:4:51"}, true},
		// yaml.v2 reads a whole number from 2^63 to 2^64-1 as a uint64, which ERL's key check
		// refuses; a larger one is a float64, refused as well, and a hexadecimal one a string.
		{"whole numbers beyond int64", "domain: d\ndescriptors:\n  - key: a\n    value: 18446744073709551615\n  - key: b\n    value: 0x8000000000000000\n" +
			"  - key: c\n    value: 9_223_372_036_854_775_808\n  - key: e\n    value: 9223372036854775807\n  - key: f\n    value: 0x1FFFFFFFFFFFFFFFF\n  - key: g\n    value: 18446744073709551616\n",
			[]string{
				"value 18446744073709551615 is a whole number from 2^63 to 2^64-1, which ERL's loader refuses (quote it for a string):\n    f.yaml:4:12",
				"value 0x8000000000000000 is a whole number from 2^63 to 2^64-1, which ERL's loader refuses (quote it for a string):\n    f.yaml:6:12",
				"value 9_223_372_036_854_775_808 is a whole number from 2^63 to 2^64-1, which ERL's loader refuses (quote it for a string):\n    f.yaml:8:12",
				"value 18446744073709551616 is a number with a fraction or an exponent, which ERL refuses (quote it for a string):\n    f.yaml:14:12",
			}, true},
		{"whole numbers within int64", "domain: d\ndescriptors:\n  - key: e\n    value: 9223372036854775807\n  - key: f\n    value: 0x1FFFFFFFFFFFFFFFF\n  - key: g\n    value: -9223372036854775808\n",
			[]string{"e=9223372036854775807: no limit", "f=0x1FFFFFFFFFFFFFFFF: no limit", "g=-9223372036854775808: no limit"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			c, err := erlconfig.Parse("f.yaml", []byte(tc.in))
			if err != nil {
				probs, ok := err.(policy.Problems)
				if !ok {
					t.Fatalf("got error %v (%T), want policy.Problems", err, err)
				}
				for _, p := range probs {
					got = append(got, p.String())
				}
			} else {
				got = limits(c.Descriptors, "")
			}
			if (err != nil) != tc.refused || strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("got (error %v)\n%s\nwant\n%s", err != nil, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if ok, out := erlLoads(t, tc.in); ok == tc.refused {
				t.Errorf("envoyproxy/ratelimit's loader: got accepted %v, want %v\n%s", ok, !tc.refused, out)
			}
		})
	}
}
