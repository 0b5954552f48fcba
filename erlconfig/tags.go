package erlconfig

import (
	"bytes"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// nonSpecificStrings gives the tag !!str to each plain scalar under n that carries the
// non-specific tag "!" in data, the document n was decoded from ("value: ! 1.5"). ERL's YAML
// decoder (yaml.v2) reads such a scalar as a string, as YAML says; yaml.v3 resolves it as if it
// had no tag (a float here) and keeps no trace of the "!", so the source text is read at the
// node's position. A merge key keeps its tag: yaml.v2 merges "! <<" too.
func nonSpecificStrings(n *yaml.Node, data []byte) {
	starts := lineStarts(data)
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		for _, c := range n.Content {
			walk(c)
		}
		const explicit = yaml.TaggedStyle | yaml.DoubleQuotedStyle | yaml.SingleQuotedStyle | yaml.LiteralStyle | yaml.FoldedStyle
		if n.Kind != yaml.ScalarNode || n.Style&explicit != 0 || n.Tag == "!!str" || n.Tag == "!!merge" {
			return
		}
		if src, ok := at(data, starts, n.Line, n.Column); ok && nonSpecificTag(src) {
			n.Tag = "!!str"
		}
	}
	walk(n)
}

// lineStarts returns the offset of each line of data, counting line breaks as the YAML reader
// does: LF, CR LF, CR, NEL, LS and PS. A UTF-8 byte order mark is not part of the first line.
func lineStarts(data []byte) []int {
	starts := []int{0}
	if bytes.HasPrefix(data, []byte("\ufeff")) {
		starts[0] = 3
	}
	for i := starts[0]; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		i += size
		switch {
		case r == '\r' && i < len(data) && data[i] == '\n':
		case r == '\n' || r == '\r' || r == 0x85 || r == 0x2028 || r == 0x2029:
			starts = append(starts, i)
		}
	}
	return starts
}

// at returns data from line and column (1-based, the column in characters), or false when data
// has no such place.
func at(data []byte, starts []int, line, col int) ([]byte, bool) {
	if line < 1 || line > len(starts) || col < 1 {
		return nil, false
	}
	i := starts[line-1]
	for range col - 1 {
		if i >= len(data) {
			return nil, false
		}
		_, size := utf8.DecodeRune(data[i:])
		i += size
	}
	return data[i:], true
}

// nonSpecificTag reports whether the node properties that src starts with, an anchor and a tag
// in either order, hold the non-specific tag: "!" or "!<!>".
func nonSpecificTag(src []byte) bool {
	for range 2 {
		end := bytes.IndexAny(src, " \t\r\n,[]{}")
		if end < 0 {
			end = len(src)
		}
		switch tok := string(src[:end]); {
		case tok == "!" || tok == "!<!>":
			return true
		case len(tok) < 2 || tok[0] != '&':
			return false
		}
		src = bytes.TrimLeft(src[end:], " \t\r\n")
	}
	return false
}
