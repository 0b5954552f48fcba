package finding

import (
	"fmt"
	"io"
	"strings"

	"github.com/rlctl/rlctl/internal/atomicfile"
)

// Format writes a report in one output format. Formats write the findings in the order they are
// given; call Sort first for stable output.
type Format interface {
	Write(w io.Writer, r *Report) error
}

// formats maps each output format's name onto its implementation.
var formats = map[string]Format{
	"text":   Text{},
	"json":   JSON{},
	"github": GitHub{},
	"sarif":  SARIF{},
}

// FormatNames lists the output formats, for help text and error messages.
var FormatNames = []string{"text", "json", "github", "sarif"}

// ParseFormat returns the format named name.
func ParseFormat(name string) (Format, error) {
	if f, ok := formats[name]; ok {
		return f, nil
	}
	return nil, fmt.Errorf("unknown output format %q (want %s)", name, strings.Join(FormatNames, ", "))
}

// WriteFile writes r in format f to the file at path atomically (see atomicfile.Write): readers
// see the old file or the whole new one, never a part. Errors are *atomicfile.Error, which name
// path.
func WriteFile(path string, f Format, r *Report) error {
	return atomicfile.Write(path, func(w io.Writer) error { return f.Write(w, r) })
}
