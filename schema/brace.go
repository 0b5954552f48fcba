package schema

import (
	"bytes"
	"strings"

	"cuelang.org/go/cue/scanner"
	"cuelang.org/go/cue/token"

	"github.com/rlctl/rlctl/policy"
)

// unclosedBrace finds the '{' that a file reported as missing a '}' at its end most likely left
// open. Counting alone would blame the outermost brace, since every later '}' closes the
// innermost one still open; but formatted CUE closes a block at the indentation of the line that
// opened it, so the first '{' whose matching '}' (by count) starts a line indented differently is
// the one that lacks its own. Without such a pair, it is the innermost brace still open at the
// end. ok is false when every brace is closed.
func unclosedBrace(name string, src []byte) (pos policy.Pos, ok bool) {
	var s scanner.Scanner
	s.Init(token.NewFile(name, -1, len(src)), src, nil, 0)
	lines := bytes.Split(src, []byte("\n"))
	indent := func(line int) (string, bool) {
		if line < 1 || line > len(lines) {
			return "", false
		}
		l := string(lines[line-1])
		trimmed := strings.TrimLeft(l, " \t")
		return l[:len(l)-len(trimmed)], true
	}
	type open struct {
		line, col int
	}
	var stack []open
	var suspect *open
	for {
		p, tok, _ := s.Scan()
		switch tok {
		case token.EOF:
			switch {
			case len(stack) == 0:
				return policy.Pos{}, false
			case suspect != nil:
				return policy.Pos{File: name, Line: suspect.line, Col: suspect.col}, true
			}
			top := stack[len(stack)-1]
			return policy.Pos{File: name, Line: top.line, Col: top.col}, true
		case token.LBRACE:
			stack = append(stack, open{p.Line(), p.Column()})
		case token.RBRACE:
			if len(stack) == 0 {
				continue
			}
			o := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			closeIndent, _ := indent(p.Line())
			openIndent, _ := indent(o.line)
			startsLine := strings.TrimSpace(string(lines[p.Line()-1]))[0] == '}'
			if suspect == nil && p.Line() != o.line && startsLine && closeIndent != openIndent {
				suspect = &o
			}
		}
	}
}
