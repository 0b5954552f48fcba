package erlconfig_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlctl/rlctl/erlconfig"
	"github.com/rlctl/rlctl/erlconfig/erltest"
	"github.com/rlctl/rlctl/internal/golden"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/schema"
)

func parseFile(t *testing.T, path string) *erlconfig.Config {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := erlconfig.Parse(path, data)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return c
}

// TestRoundTrip imports each testdata/good file, loads the CUE it gives with the policy loader,
// renders it with FromModel and wants the same descriptor tree and limits back. The inputs and
// the rendered configs must both load in envoyproxy/ratelimit's loader, and the imported CUE is
// checked against testdata/good/NAME.cue.golden (-update rewrites it).
func TestRoundTrip(t *testing.T) {
	inputs, err := filepath.Glob("testdata/good/*.yaml")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no inputs: %v", err)
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		t.Run(name, func(t *testing.T) {
			c := parseFile(t, in)
			files, notes, err := erlconfig.Import([]*erlconfig.Config{c})
			if err != nil {
				t.Fatalf("import: %v", err)
			}
			for _, n := range notes {
				t.Logf("note: %s", n)
			}
			if len(files) != 1 || files[0].Name != c.Domain+".cue" {
				t.Fatalf("got files %v, want %s.cue", files, c.Domain)
			}
			golden.Check(t, filepath.Join("testdata", "good", name+".cue.golden"), files[0].Data)

			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, files[0].Name), files[0].Data, 0o644); err != nil {
				t.Fatal(err)
			}
			m, err := schema.Load(dir)
			if err != nil {
				t.Fatalf("loading the imported policy: %v\n%s", err, files[0].Data)
			}
			cfgs, rnotes := erlconfig.FromModel(m)
			for _, n := range rnotes {
				if !strings.HasPrefix(n.Message, "stage soft rendered as quota_mode") {
					t.Errorf("rendering the import: got note %+v, want only soft stages (quota_mode)", n)
				}
			}
			data, err := cfgs[0].Marshal(erlconfig.YAML)
			if err != nil {
				t.Fatal(err)
			}
			back, err := erlconfig.Parse("rendered.yaml", data)
			if err != nil {
				t.Fatalf("parsing the rendered config: %v\n%s", err, data)
			}
			if got, want := tree(back.Descriptors), tree(c.Descriptors); !slices.Equal(got, want) {
				t.Errorf("round trip: got\n%s\nwant\n%s\nrendered:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), data)
			}
			if back.Domain != c.Domain {
				t.Errorf("domain: got %q, want %q", back.Domain, c.Domain)
			}
			for _, check := range []struct{ what, dir string }{{"input", filepath.Dir(in) + "/" + filepath.Base(in)}, {"rendered", ""}} {
				erlDir := t.TempDir()
				src := data
				if check.what == "input" {
					src, _ = os.ReadFile(in)
				}
				if err := os.WriteFile(filepath.Join(erlDir, name+".yaml"), src, 0o644); err != nil {
					t.Fatal(err)
				}
				if out, err := erltest.Check(t, erlDir); err != nil {
					t.Errorf("envoyproxy/ratelimit refused the %s: %v\n%s", check.what, err, out)
				}
			}
		})
	}
}

// tree lists a descriptor tree's limits in a canonical form, one line per descriptor that has a
// limit or leads to one: its path, then its limit and modes. Siblings are in ERL's matching
// order, where only the order of wildcards of one key is significant; descriptors that lead to
// no limit (unlimited, or placeholders), which admit like a missing descriptor, are left out.
// Names are left out: ERL uses them only for replaces, which Import refuses.
func tree(ds []erlconfig.Descriptor) []string {
	var out []string
	var walk func(ds []erlconfig.Descriptor, prefix string)
	walk = func(ds []erlconfig.Descriptor, prefix string) {
		type entry struct {
			rank int
			key  string
			d    erlconfig.Descriptor
		}
		var es []entry
		for i, d := range ds {
			if !leadsToLimit(d) {
				continue
			}
			switch {
			case d.Value == "":
				es = append(es, entry{2, d.Key, d})
			case strings.HasSuffix(d.Value, "*"):
				es = append(es, entry{1, fmt.Sprintf("%s\x00%06d", d.Key, i), d})
			default:
				es = append(es, entry{0, d.Key + "\x00" + d.Value, d})
			}
		}
		slices.SortStableFunc(es, func(a, b entry) int {
			if a.rank != b.rank {
				return a.rank - b.rank
			}
			return strings.Compare(a.key, b.key)
		})
		for _, e := range es {
			d := e.d
			p := prefix + " > " + d.Key
			if d.Value != "" {
				p += "=" + d.Value
			}
			line := p
			if rl := d.RateLimit; rl != nil && !rl.Unlimited {
				line += fmt.Sprintf(": %d per %s shadow=%v quota=%v", rl.RequestsPerUnit, rl.Unit, d.ShadowMode, d.QuotaMode && !d.ShadowMode)
			}
			out = append(out, line)
			walk(d.Descriptors, p)
		}
	}
	walk(ds, "")
	return out
}

func leadsToLimit(d erlconfig.Descriptor) bool {
	if d.RateLimit != nil && !d.RateLimit.Unlimited {
		return true
	}
	for _, c := range d.Descriptors {
		if leadsToLimit(c) {
			return true
		}
	}
	return false
}

// importedModel imports one configuration and loads the CUE it gives.
func importedModel(t *testing.T, c *erlconfig.Config) *policy.Model {
	t.Helper()
	files, _, err := erlconfig.Import([]*erlconfig.Config{c})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, files[0].Name), files[0].Data, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := schema.Load(dir)
	if err != nil {
		t.Fatalf("%v\n%s", err, files[0].Data)
	}
	return m
}

// TestImportNames: a rate_limit's name is kept when it is valid, made valid otherwise, made
// unique, and a descriptor without one is named after its key path.
func TestImportNames(t *testing.T) {
	m := importedModel(t, parseFile(t, "testdata/good/features.yaml"))
	var got []string
	for _, r := range m.Domains[0].Rules {
		got = append(got, r.Name+" "+describe(r.Match))
	}
	slices.Sort(got)
	want := []string{
		`acme_total tenant.id="acme"`,
		`acme_total_2 tenant.id="acme" > plan`,
		`org_acme org="acme"`,
		`r_9lives tenant.id="a*b"`,
		`tenant_id_acme_region_eu tenant.id="acme" > region="eu-*"`,
		`x_api_key x-api-key`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("got rules\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestImportKeepsValidNames: a rate_limit's name that is a valid rlctl rule name, '-' and '.'
// included, is kept as it is, so that rendering an import gives back the names a render wrote.
func TestImportKeepsValidNames(t *testing.T) {
	cfg, err := erlconfig.Parse("n.yaml", []byte(`domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 1, name: login-burst}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 1, name: v1.login}
  - key: c
    rate_limit: {unit: minute, requests_per_unit: 1, name: "bad name!"}
`))
	if err != nil {
		t.Fatal(err)
	}
	m := importedModel(t, cfg)
	var got []string
	for _, r := range m.Domains[0].Rules {
		got = append(got, r.Name)
	}
	slices.Sort(got)
	if want := []string{"bad_name", "login-burst", "v1.login"}; !slices.Equal(got, want) {
		t.Errorf("got rules %q, want %q", got, want)
	}
}

func describe(ms []policy.Match) string {
	var parts []string
	for _, m := range ms {
		parts = append(parts, m.String())
	}
	return strings.Join(parts, " > ")
}

// TestImportNotes: what is imported with a caveat is said, at its file:line:col.
func TestImportNotes(t *testing.T) {
	var cfgs []*erlconfig.Config
	for _, f := range []string{"testdata/good/features.yaml", "testdata/good/internal.yaml"} {
		cfgs = append(cfgs, parseFile(t, f))
	}
	_, notes, err := erlconfig.Import(cfgs)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range notes {
		got = append(got, n.String())
	}
	want := []string{
		"quota_mode imported as the soft stage: it admits a request over the limit with a RateLimit-Warning header, where ERL reports it in dynamic metadata:\n    testdata/good/features.yaml:17:9",
		"value \"a*b\": a '*' before the end is a literal character, in ERL as in rlctl; imported as it is:\n    testdata/good/features.yaml:20:5",
		"quota_mode beside shadow_mode: imported as the shadow stage, which never rejects either:\n    testdata/good/features.yaml:30:5",
		"unlimited ldap imported as no rule: a request that matches no rule is admitted:\n    testdata/good/internal.yaml:6:7",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got notes\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestImportNotesCrossKeys: a descriptor that ERL matches for entries of another key is imported
// with a note saying which, since rlctl matches entries by key.
func TestImportNotesCrossKeys(t *testing.T) {
	cfg, err := erlconfig.Parse("x.yaml", []byte(`domain: d
descriptors:
  - key: user
    value: "*"
    rate_limit: {unit: minute, requests_per_unit: 10, name: all_users}
  - key: user_tier
    rate_limit: {unit: minute, requests_per_unit: 1000, name: tiers}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 5, name: tenants}
`))
	if err != nil {
		t.Fatal(err)
	}
	_, notes, err := erlconfig.Import([]*erlconfig.Config{cfg})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range notes {
		got = append(got, n.String())
	}
	const why = ", since it looks an entry up by its key and value joined with '_'; rlctl matches an entry by its key, so it limits those requests otherwise:\n    "
	want := []string{
		`ERL also matches every entry of key user_tier that no exact user_tier descriptor beside it matches ("user_tier_" starts with "user_") to this descriptor` + why + "x.yaml:3:5",
		`ERL also matches the entry user="tier" to this descriptor` + why + "x.yaml:6:5",
		// The counters meet as well: "user_tier_a_" is both descriptors' Redis key.
		`ERL counts user_tier="a" and the descriptor user="tier_a" at x.yaml:3 in one Redis key: ` + counterWhyText + "; rlctl keeps them apart:\n    x.yaml:6:5",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got notes\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// counterWhyText is erlconfig's counterWhy, which this external test cannot name.
const counterWhyText = "ERL joins a descriptor's keys and values with '_' into its Redis key and does not escape values, so a client that chooses such a value spends the other's counter"

// TestImportRefuses: each testdata/bad file is refused with every problem at its file:line:col,
// and nothing is returned.
func TestImportRefuses(t *testing.T) {
	for _, tc := range []struct {
		file string
		want []string // problems: message, then positions
	}{
		{"syntax", []string{"bad YAML: did not find expected ',' or '}':\n    testdata/bad/syntax.yaml:3"}},
		{"unknown_key", []string{`unknown key "burst" in a rate_limit (want unit, requests_per_unit, name, unlimited, replaces):` + "\n    testdata/bad/unknown_key.yaml:7:7"}},
		{"replaces", []string{"replaces has no rlctl equivalent: rlctl applies every rule a request's descriptors match:\n    testdata/bad/replaces.yaml:18:11"}},
		{"detailed_metric", []string{"detailed_metric has no rlctl equivalent: rlctl's metrics are per rule, never per descriptor value; remove it to import:\n    testdata/bad/detailed_metric.yaml:4:5"}},
		{"value_to_metric", []string{"value_to_metric has no rlctl equivalent: rlctl's metrics are per rule, never per descriptor value; remove it to import:\n    testdata/bad/value_to_metric.yaml:4:5"}},
		{"share_threshold", []string{"share_threshold has no rlctl equivalent: rlctl counts each value that a wildcard matches on its own:\n    testdata/bad/share_threshold.yaml:5:5"}},
		{"deny_all", []string{"requests_per_unit 0 (deny every request) has no rlctl equivalent: a limit admits at least 1 request:\n    testdata/bad/deny_all.yaml:11:7"}},
		{"exempt", []string{
			"descriptor user=\"admin\" is unlimited, so ERL admits its values that descriptor user would limit; rlctl has no rule that exempts values from another:\n    testdata/bad/exempt.yaml:7:5\n    testdata/bad/exempt.yaml:3:5",
			"descriptor user=\"bot\" has no rate_limit and nothing below it, so ERL admits its values that descriptor user would limit; rlctl has no rule that exempts values from another:\n    testdata/bad/exempt.yaml:11:5\n    testdata/bad/exempt.yaml:3:5",
			// Something below it, none of it limited: it said "nothing below it".
			"descriptor user=\"crawler\" has no rate_limit and nothing below it is limited, so ERL admits its values that descriptor user would limit; rlctl has no rule that exempts values from another:\n    testdata/bad/exempt.yaml:13:5\n    testdata/bad/exempt.yaml:3:5",
		}},
		{"range", []string{"requests_per_unit 285616 per year is beyond rlctl's exact range: at most 285615 per year ((requests + 1) × window in ms up to 2^53-1):\n    testdata/bad/range.yaml:4:30"}},
		{"duplicate", []string{"duplicate descriptor \"a_b_c\": ERL reads it as the one before (it joins key and value with '_'):\n    testdata/bad/duplicate.yaml:6:5\n    testdata/bad/duplicate.yaml:3:5"}},
		{"units", []string{
			"unknown unit \"fortnight\" (want second, minute, hour, day, week, month or year):\n    testdata/bad/units.yaml:4:24",
			"unit \"second\" beside unlimited: an unlimited limit has no unit:\n    testdata/bad/units.yaml:6:24",
			"requests_per_unit must be a whole number from 0 to 4294967295:\n    testdata/bad/units.yaml:8:37",
			"descriptor has no key:\n    testdata/bad/units.yaml:9:5",
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := "testdata/bad/" + tc.file + ".yaml"
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			c, err := erlconfig.Parse(path, data)
			if err == nil {
				var files []erlconfig.File
				files, _, err = erlconfig.Import([]*erlconfig.Config{c})
				if files != nil {
					t.Errorf("got files %v with an error, want none", files)
				}
			}
			probs, ok := err.(policy.Problems)
			if !ok {
				t.Fatalf("got error %v (%T), want policy.Problems", err, err)
			}
			var got []string
			for _, p := range probs {
				got = append(got, p.String())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got problems\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// TestImportBadKey: a key that is no rlctl name is refused (units.yaml's parse problems hide it).
func TestImportBadKey(t *testing.T) {
	c, err := erlconfig.Parse("k.yaml", []byte("domain: d\ndescriptors:\n  - key: bad key\n    rate_limit: {unit: second, requests_per_unit: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = erlconfig.Import([]*erlconfig.Config{c})
	want := "descriptor key \"bad key\" is not a valid rlctl key: a name starts with a letter or '_' and holds only letters, digits, '_', '.' and '-':\n    k.yaml:3:5"
	if err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
}

// TestImportKeyAtTwoLevels: a key at two levels of one descriptor path (generic_key "a", then
// generic_key "b") is refused: rlctl gives a key one source and one value, so the imported rule
// could never match. It was imported as such a rule, and lint then refused it.
func TestImportKeyAtTwoLevels(t *testing.T) {
	c, err := erlconfig.Parse("k.yaml", []byte("domain: d\ndescriptors:\n  - key: generic_key\n    value: a\n    descriptors:\n"+
		"      - key: generic_key\n        value: b\n        rate_limit: {unit: minute, requests_per_unit: 5}\n"))
	if err != nil {
		t.Fatal(err)
	}
	files, _, err := erlconfig.Import([]*erlconfig.Config{c})
	want := "descriptor key \"generic_key\" is at levels 1 and 2: rlctl gives a key one source, with one value per request; " +
		"give one level another key, in Envoy's rate_limits action (descriptor_key) and here:\n    k.yaml:6:9"
	if err == nil || err.Error() != want || files != nil {
		t.Errorf("got %d files, error %v, want none and %s", len(files), err, want)
	}
}

// TestImportDuplicateDomain: a domain given twice, in two files, is refused at both positions.
func TestImportDuplicateDomain(t *testing.T) {
	a, err := erlconfig.Parse("a.yaml", []byte("domain: d\ndescriptors: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := erlconfig.Parse("b.yaml", []byte("# again\ndomain: d\n"))
	if err != nil {
		t.Fatal(err)
	}
	files, _, err := erlconfig.Import([]*erlconfig.Config{a, b})
	want := "domain \"d\" is given twice:\n    b.yaml:2:1\n    a.yaml:1:1"
	if files != nil || err == nil || err.Error() != want {
		t.Errorf("got %v, %v; want no files and %s", files, err, want)
	}
}

// TestParseStrict: what Parse refuses beyond the fixtures.
func TestParseStrict(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "empty file: an ERL configuration has a domain and descriptors:\n    f.yaml"},
		{"# only a comment\n", "empty file: an ERL configuration has a domain and descriptors:\n    f.yaml"},
		{"descriptors: []\n", "no domain: an ERL configuration names its domain:\n    f.yaml:1:1"},
		{"domain: d\ndomain: e\n", "key \"domain\" is given twice in the document:\n    f.yaml:2:1\n    f.yaml:1:1"},
		{"domain: d\n---\ndomain: e\n", "a second YAML document: ERL reads one document per file:\n    f.yaml:2:1"},
		{"- a\n", "the document must be a mapping:\n    f.yaml:1:1"},
		{"domain: d\ndescriptors: {key: a}\n", "descriptors must be a list:\n    f.yaml:2:14"},
		{"domain: d\ndescriptors:\n  - key: a\n    shadow_mode: maybe\n", "shadow_mode must be true or false:\n    f.yaml:4:18"},
		{"domain: d\ndescriptors:\n  - key: a\n    unit: second\n", "unknown key \"unit\" in a descriptor (want key, value, rate_limit, descriptors, shadow_mode, quota_mode, detailed_metric, value_to_metric, share_threshold):\n    f.yaml:4:5"},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {}\n", "rate_limit has no unit (want second, minute, hour, day, week, month or year):\n    f.yaml:4:17"},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, name: n, replaces: [{name: n}]}\n", "replaces names the limit's own name \"n\":\n    f.yaml:4:74"},
		{"domain: d\ndescriptors:\n  - key: a\n    value: b\n    share_threshold: true\n", "share_threshold needs a wildcard value (ending in '*'):\n    f.yaml:5:5"},
		// ERL refuses a number with a fraction anywhere; read here, 10.9 requests became 10.
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 10.9}\n",
			"requests_per_unit 10.9 is a number with a fraction or an exponent, which ERL refuses (quote it for a string):\n    f.yaml:4:51"},
		{"domain: d\ndescriptors:\n  - key: a\n    value: 1.5\n",
			"value 1.5 is a number with a fraction or an exponent, which ERL refuses (quote it for a string):\n    f.yaml:4:12"},
		{"domain: d\ndescriptors:\n  - key: a\n    value: 1e3\n",
			"value 1e3 is a number with a fraction or an exponent, which ERL refuses (quote it for a string):\n    f.yaml:4:12"},
	} {
		_, err := erlconfig.Parse("f.yaml", []byte(tc.in))
		if err == nil || err.Error() != tc.want {
			t.Errorf("Parse(%q): got %v, want %s", tc.in, err, tc.want)
		}
	}
}

// TestImportYAMLForms: YAML that ERL's loader reads is imported as it reads it: a merge key
// (<<: *anchor, applied where it stands; see TestParseAsERL), a !!binary value (the bytes it decodes to; it was imported as
// its base64 text) and a byte order mark in a value (CUE's formatter refused it, and the import
// failed).
func TestImportYAMLForms(t *testing.T) {
	cfg, err := erlconfig.Parse("x.yaml", []byte(`domain: d
descriptors:
  - key: a
    rate_limit: &std {unit: second, requests_per_unit: 5}
  - key: b
    rate_limit: {<<: *std, requests_per_unit: 7}
  - key: c
    value: !!binary aGVsbG8=
    rate_limit: {<<: [*std, {unit: minute}]}
  - key: e
    value: "x\ufeffy"
    rate_limit: *std
`))
	if err != nil {
		t.Fatal(err)
	}
	m := importedModel(t, cfg)
	got := map[string]string{}
	for _, r := range m.Domains[0].Rules {
		got[r.Name] = fmt.Sprintf("%s %d/%dms", describe(r.Match), r.Limits[0].Requests, r.Limits[0].WindowMs)
	}
	want := map[string]string{
		"a":       "a 5/1000ms",
		"b":       "b 7/1000ms",
		"c_hello": `c="hello" 5/1000ms`, // of two merged mappings, the first's unit
		"e_x_y":   `e="x\ufeffy" 5/1000ms`,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("imported rules:\n got %v\nwant %v", got, want)
	}
}

// TestParseCyclicAliases: an alias that names a node holding it (through a merge key or a
// descriptor list) is refused at its position; both overflowed the stack and killed the process.
func TestParseCyclicAliases(t *testing.T) {
	for name, doc := range map[string]string{
		"merge":       "domain: d\ndescriptors:\n  - key: a\n    rate_limit: &x {unit: second, requests_per_unit: 5, <<: *x}\n",
		"descriptors": "domain: d\ndescriptors: &d\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5}\n    descriptors: *d\n",
	} {
		_, err := erlconfig.Parse("x.yaml", []byte(doc))
		if err == nil || !strings.Contains(err.Error(), "names a node that holds it: the YAML is cyclic") {
			t.Errorf("%s: got %v, want the cycle refused", name, err)
		}
	}
}

// TestParseAliasBomb: aliases of aliases ("billion laughs") make a file of a few hundred bytes
// a descriptor tree of 10^30 nodes, whose walk would not end; it is refused at once. The same
// aliases used a few times are read.
func TestParseAliasBomb(t *testing.T) {
	doc := func(levels, fanout int) string {
		var b strings.Builder
		b.WriteString("domain: d\nlevels:\n  - &l0 [{key: a, rate_limit: {unit: second, requests_per_unit: 5}}]\n")
		for i := 1; i <= levels; i++ {
			fmt.Fprintf(&b, "  - &l%d [", i)
			for j := range fanout {
				if j > 0 {
					b.WriteString(", ")
				}
				fmt.Fprintf(&b, "{key: k%d, descriptors: *l%d}", j, i-1)
			}
			b.WriteString("]\n")
		}
		fmt.Fprintf(&b, "descriptors: *l%d\n", levels)
		return b.String()
	}
	bomb := doc(30, 10)
	done := make(chan error, 1)
	go func() {
		_, err := erlconfig.Parse("bomb.yaml", []byte(bomb))
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "aliases expand the document to over 1000000 nodes") {
			t.Errorf("a %d-byte alias bomb: got %v, want it refused", len(bomb), err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("a %d-byte alias bomb: still parsing after 30 s", len(bomb))
	}
	if _, err := erlconfig.Parse("small.yaml", []byte(doc(2, 3))); err != nil && strings.Contains(err.Error(), "aliases expand") {
		t.Errorf("aliases that expand to a few nodes: %v", err)
	}
}
