package finding

import (
	"bufio"
	"io"
	"strconv"
	"strings"
)

// GitHub writes GitHub Actions workflow commands, which annotate the pull request's files:
//
//	::error file=policies/api.cue,line=12,col=3,title=RL007::drift 2.40% over tolerance 2.00%: ...
//
// Values are escaped as the Actions runner expects: '%', CR and LF in the message, and also ':'
// and ',' in properties.
type GitHub struct{}

var (
	githubData     = strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A")
	githubProperty = strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C")
)

// Write implements Format.
func (GitHub) Write(w io.Writer, r *Report) error {
	bw := bufio.NewWriter(w)
	for _, f := range r.Findings {
		bw.WriteString("::")
		bw.WriteString(string(f.Severity))
		sep := " "
		prop := func(k, v string) {
			bw.WriteString(sep + k + "=" + githubProperty.Replace(v))
			sep = ","
		}
		if f.Pos.File != "" {
			prop("file", f.Pos.File)
		}
		if f.Pos.Line > 0 {
			prop("line", strconv.Itoa(f.Pos.Line))
		}
		if f.Pos.Col > 0 {
			prop("col", strconv.Itoa(f.Pos.Col))
		}
		prop("title", f.ID)
		bw.WriteString("::")
		bw.WriteString(githubData.Replace(f.Message))
		bw.WriteByte('\n')
	}
	return bw.Flush()
}
