package erlconfig_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rlctl/rlctl/erlconfig"
	"github.com/rlctl/rlctl/schema"
)

// TestImportFileNames: each domain is written to a file that the policy loader reads. A domain
// starting with '_' was written to _NAME.cue, which the loader skips as it skips every file whose
// name starts with '_' or '.', so its limits vanished without a word.
func TestImportFileNames(t *testing.T) {
	var cfgs []*erlconfig.Config
	for i, domain := range []string{"_internal", "internal", "api-gateway.v2", "__x"} {
		c, err := erlconfig.Parse("f.yaml", []byte("domain: "+domain+"\ndescriptors:\n  - key: k"+string(rune('a'+i))+
			"\n    rate_limit: {unit: second, requests_per_unit: 5}\n"))
		if err != nil {
			t.Fatal(err)
		}
		cfgs = append(cfgs, c)
	}
	files, _, err := erlconfig.Import(cfgs)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	dir := t.TempDir()
	for _, f := range files {
		names = append(names, f.Name)
		if err := os.WriteFile(filepath.Join(dir, f.Name), f.Data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"%5Finternal.cue", "internal.cue", "api-gateway.v2.cue", "%5F_x.cue"}; !slices.Equal(names, want) {
		t.Errorf("got files %q, want %q", names, want)
	}
	m, err := schema.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range m.Domains {
		for _, r := range d.Rules {
			got = append(got, d.Name+" "+r.Name)
		}
	}
	slices.Sort(got)
	if want := []string{"__x kd", "_internal ka", "api-gateway.v2 kc", "internal kb"}; !slices.Equal(got, want) {
		t.Errorf("loaded rules %q, want %q", got, want)
	}
}

// TestImportRefusesFileUnsafeDomains: a domain that no file could be named after ('/', NUL, a
// leading '.') is refused at its position, as every domain that is not an rlctl name is.
func TestImportRefusesFileUnsafeDomains(t *testing.T) {
	for _, domain := range []string{`"a/b"`, `"..x"`, `"a\0b"`, `"."`, `".hidden"`} {
		c, err := erlconfig.Parse("f.yaml", []byte("domain: "+domain+"\ndescriptors: []\n"))
		if err != nil {
			t.Fatal(err)
		}
		files, _, err := erlconfig.Import([]*erlconfig.Config{c})
		if files != nil || err == nil || !strings.Contains(err.Error(), "is not a valid rlctl domain name") || !strings.HasSuffix(err.Error(), "f.yaml:1:1") {
			t.Errorf("domain %s: got %d files, error %v; want it refused at f.yaml:1:1", domain, len(files), err)
		}
	}
}

// TestImportNoRequestsPerUnit: a rate_limit without requests_per_unit (0 in ERL: deny all) is
// refused at the rate_limit's position; it was refused with no position at all.
func TestImportNoRequestsPerUnit(t *testing.T) {
	c, err := erlconfig.Parse("f.yaml", []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second}\n"))
	if err != nil {
		t.Fatal(err)
	}
	files, _, err := erlconfig.Import([]*erlconfig.Config{c})
	want := "rate_limit has no requests_per_unit, which ERL reads as 0 (deny every request); rlctl has no equivalent: a limit admits at least 1 request:\n    f.yaml:4:17"
	if files != nil || err == nil || err.Error() != want {
		t.Errorf("got %d files, error %v; want none and %s", len(files), err, want)
	}
}

// TestImportLimitlessDescriptor: a descriptor with neither a rate_limit nor anything below it
// becomes no rule, with a note and a comment in the CUE, as an unlimited one does; it was
// dropped without either.
func TestImportLimitlessDescriptor(t *testing.T) {
	c, err := erlconfig.Parse("f.yaml", []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5}\n"+
		"  - key: b\n    value: x\n  - key: c\n    rate_limit: ~\n    descriptors: []\n  - key: e\n    descriptors:\n      - key: f\n"))
	if err != nil {
		t.Fatal(err)
	}
	files, notes, err := erlconfig.Import([]*erlconfig.Config{c})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range notes {
		got = append(got, n.String())
	}
	const why = " has no rate_limit and nothing below it: imported as no rule: a request that matches no rule is admitted:\n    "
	want := []string{`descriptor b="x"` + why + "f.yaml:5:5", "descriptor c" + why + "f.yaml:7:5", "descriptor e > f" + why + "f.yaml:12:9"}
	if !slices.Equal(got, want) {
		t.Errorf("got notes\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, line := range []string{
		`// f.yaml:5: ERL's descriptor b="x", with no rate_limit and nothing below it, is no rule here: a request that matches no rule is admitted.`,
		`// f.yaml:12: ERL's descriptor e > f, with no rate_limit and nothing below it, is no rule here: a request that matches no rule is admitted.`,
	} {
		if !strings.Contains(string(files[0].Data), line) {
			t.Errorf("the CUE has no line %s:\n%s", line, files[0].Data)
		}
	}
}
