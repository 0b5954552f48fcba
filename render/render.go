// Package render owns every configuration rlctl renders from a compiled policy model: the
// enforcer's snapshot, the Envoy HTTP filters and route rate_limits that build the descriptors the
// rules match, envoyproxy/ratelimit YAML, and Prometheus alerting rules.
//
// A target turns a *policy.Model into one or more files. Output is deterministic: the same model
// gives byte-identical files, with keys and lists in a stable order, so that a policy change gives
// a minimal Git diff. What a target cannot express exactly is never dropped silently: it is a
// Finding, and Options.Strict makes every approximation an error.
package render

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/rlctl/rlctl/internal/atomicfile"
	"github.com/rlctl/rlctl/policy"
)

// File is one rendered file. Name is a file name without directories, such as
// "edge_gateway_limits.yaml".
type File struct {
	Name string
	Data []byte
}

// Severity says how much a finding matters.
type Severity string

// The finding severities.
const (
	// Approximation: the target cannot express the policy exactly and rendered the nearest
	// equivalent. With Options.Strict it is an error.
	Approximation Severity = "approximation"
	// Assumption: the output is exact only if the deployment provides something the target names
	// (a header set in front of Envoy, a jwt_authn filter); it is a note, never an error.
	Assumption Severity = "assumption"
)

// Finding is something a target could not render exactly, or assumed.
type Finding struct {
	Severity Severity   `json:"severity"`
	Target   string     `json:"target"`
	Domain   string     `json:"domain,omitempty"`
	Rule     string     `json:"rule,omitempty"`
	Message  string     `json:"message"`
	Pos      policy.Pos `json:"pos"`
}

// String formats f as "target: severity: domain/rule: message", then its position on an indented
// line, like the loader's problems.
func (f Finding) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s: ", f.Target, f.Severity)
	switch {
	case f.Domain != "" && f.Rule != "":
		fmt.Fprintf(&b, "%s/%s: ", f.Domain, f.Rule)
	case f.Domain != "":
		fmt.Fprintf(&b, "%s: ", f.Domain)
	}
	b.WriteString(f.Message)
	if p := f.Pos.String(); p != "" {
		fmt.Fprintf(&b, "\n    %s", p)
	}
	return b.String()
}

// Options are the settings of a render. The zero value renders with every default.
type Options struct {
	// Format is the output format, one of the target's Formats; "" is the target's default.
	Format string
	// Strict makes every Approximation an error (ErrStrict).
	Strict bool
	// Envoy holds the envoy target's settings.
	Envoy EnvoyOptions
}

// Result is what a target rendered.
type Result struct {
	Files    []File
	Findings []Finding
}

// Target is one kind of output.
type Target struct {
	Name string
	// Formats are the output formats the target writes, the default first.
	Formats []string
	// MultiFile is true when the target writes several files (one per domain, say), so that
	// --out names a directory.
	MultiFile bool
	// Doc is a line for the command's help.
	Doc string

	render func(m *policy.Model, o Options) (Result, error)
	// owns reports whether a file of a several-file target's directory, named name and holding
	// head (its first bytes), is one the target writes for a domain, so that one no render
	// writes any more is a leftover (Leftovers). Nil: none is.
	owns func(name string, head []byte, format string) bool
}

// ErrStrict means Options.Strict was set and the target had to approximate.
var ErrStrict = errors.New("approximations are errors under --strict")

// ErrFormat means the target does not write the requested format.
var ErrFormat = errors.New("unknown output format")

// Render renders m with o.
func (t Target) Render(m *policy.Model, o Options) (Result, error) {
	if o.Format == "" {
		o.Format = t.Formats[0]
	}
	if !slices.Contains(t.Formats, o.Format) {
		return Result{}, fmt.Errorf("%w %q for target %s (want %s)", ErrFormat, o.Format, t.Name, strings.Join(t.Formats, ", "))
	}
	res, err := t.render(m, o)
	if err != nil {
		return Result{}, err
	}
	for i := range res.Findings {
		res.Findings[i].Target = t.Name
	}
	slices.SortStableFunc(res.Findings, func(a, b Finding) int {
		if c := strings.Compare(a.Domain, b.Domain); c != 0 {
			return c
		}
		return a.Pos.Compare(b.Pos)
	})
	if o.Strict {
		for _, f := range res.Findings {
			if f.Severity == Approximation {
				return res, ErrStrict
			}
		}
	}
	return res, nil
}

// Targets returns every target, sorted by name.
func Targets() []Target {
	ts := slices.Clone(targets)
	slices.SortFunc(ts, func(a, b Target) int { return strings.Compare(a.Name, b.Name) })
	return ts
}

// targets are registered by the files that define them, each in an init function, so that adding
// a target touches only its own file.
var targets []Target

func register(t Target) { targets = append(targets, t) }

// Lookup returns the target named name.
func Lookup(name string) (Target, bool) {
	for _, t := range Targets() {
		if t.Name == name {
			return t, true
		}
	}
	return Target{}, false
}

// Names returns the target names, sorted.
func Names() []string {
	var names []string
	for _, t := range Targets() {
		names = append(names, t.Name)
	}
	return names
}

// WriteStream writes files to w. The file of a one-file render is written as it is; the files
// of a target that writes several (multiFile, one per domain: one, when there is one domain)
// make one multi-document YAML stream, each document headed by "---" and a "# file: NAME"
// comment, so that a script splits any such output the same way. (JSON documents are YAML
// too, so the stream stays one valid YAML stream in either format.)
func WriteStream(w io.Writer, files []File, multiFile bool) error {
	if !multiFile && len(files) == 1 {
		_, err := w.Write(files[0].Data)
		return err
	}
	for _, f := range files {
		if _, err := fmt.Fprintf(w, "---\n# file: %s\n", f.Name); err != nil {
			return err
		}
		data := f.Data
		if len(data) > 0 && data[len(data)-1] != '\n' {
			data = append(slices.Clip(data), '\n')
		}
		if _, err := w.Write(data); err != nil {
			return err
		}
	}
	return nil
}

// Leftovers returns the names of the files of dir, sorted, that t writes for a domain (its
// file names, and for ratelimit's YAML its header) in format, and that are not among files: in
// a directory a several-file target renders into, the files of a domain since removed or
// renamed, which whatever reads the directory (envoyproxy/ratelimit loads every file of its
// config directory) goes on reading. Other files (another target's, a bootstrap, hand-written
// ones, hidden ones) are never counted. A dir that does not exist has none.
func (t Target) Leftovers(dir string, files []File, format string) ([]string, error) {
	if t.owns == nil {
		return nil, nil
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	written := make(map[string]bool, len(files))
	for _, f := range files {
		written[f.Name] = true
	}
	var out []string
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || strings.HasPrefix(name, ".") || written[name] || !strings.HasSuffix(name, "."+format) {
			continue
		}
		head, err := readHead(filepath.Join(dir, name), 256)
		if err != nil {
			return nil, err
		}
		if t.owns(name, head, format) {
			out = append(out, name)
		}
	}
	return out, nil
}

// readHead returns the first n bytes of the file at path, or fewer.
func readHead(path string, n int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, n)
	k, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return buf[:k], nil
}

// WriteDir writes each file into dir, creating dir when it is missing. Each file is written
// atomically; files of dir that the render did not produce are left alone (see Leftovers).
func WriteDir(dir string, files []File) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		if f.Name != filepath.Base(f.Name) || f.Name == "." || f.Name == ".." {
			return fmt.Errorf("render: file name %q is not a plain name", f.Name)
		}
		if err := atomicfile.Write(filepath.Join(dir, f.Name), func(w io.Writer) error {
			_, err := w.Write(f.Data)
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}
