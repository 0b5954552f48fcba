package accesslog

// Parser parses the lines of one Reader (Reader.ReadRaw) into Records. A Parser is for one
// goroutine at a time; several Parsers may parse lines of the same Reader concurrently, while
// the Reader reads.
type Parser struct {
	r     *Reader // its name, noTime and nothing the reading goroutine changes
	parse func(line string, rec *Record) error
	seen  []bool // see Reader.mapped
}

// NewParser returns a parser of r's format and mappings. Create one per goroutine that parses,
// not one per line: the Reader keeps them all, for Unseen.
func (r *Reader) NewParser() *Parser {
	parse, seen := r.newParse()
	p := &Parser{r: r, parse: parse, seen: seen}
	r.mu.Lock()
	r.parsers = append(r.parsers, p)
	r.mu.Unlock()
	return p
}

// Parse fills rec from line, line number num of the log as Reader.ReadRaw returned them,
// reusing rec's header slice: rec is what ReadArena would have read, File and Line included,
// and its strings view line. A line that cannot be parsed, or that has no timestamp, is a
// *LineError, as ReadArena would have returned it.
func (p *Parser) Parse(line string, num int64, rec *Record) error {
	rec.reset()
	if err := p.parse(line, rec); err != nil {
		return lineError(p.r.name, num, err, line)
	}
	if rec.TimeMs == noTimestamp {
		return lineError(p.r.name, num, p.r.noTime, line)
	}
	rec.File, rec.Line = p.r.name, num
	return nil
}
