package finding

import (
	"bufio"
	"io"
)

// Text writes one line per finding, "file:line:col: severity: message [ID]", the form editors and
// compilers use. It writes no summary: callers print Report.Summary where they choose.
type Text struct{}

// Write implements Format.
func (Text) Write(w io.Writer, r *Report) error {
	bw := bufio.NewWriter(w)
	for _, f := range r.Findings {
		bw.WriteString(f.String())
		bw.WriteByte('\n')
	}
	return bw.Flush()
}
