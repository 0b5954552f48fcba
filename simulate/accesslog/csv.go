package accesslog

import (
	"encoding/csv"
	"fmt"
	"strings"
)

// csvState reads CSV with a header row naming the columns; columns map onto fields like JSON
// keys do. Each line is parsed on its own, so a record may not span lines.
type csvState struct {
	keys    map[string]target
	columns []target // nil until the header row is read
	hasCol  []bool
}

func (c *csvState) parse(line string, rec *Record) error {
	r := csv.NewReader(strings.NewReader(line))
	r.FieldsPerRecord = -1
	r.LazyQuotes = true
	fields, err := r.Read()
	if err != nil {
		return fmt.Errorf("csv: %w", err)
	}
	if c.columns == nil {
		c.columns = make([]target, len(fields))
		c.hasCol = make([]bool, len(fields))
		found := false
		for i, name := range fields {
			name = strings.TrimSpace(strings.TrimPrefix(name, "\ufeff"))
			if tg, ok := c.keys[name]; ok {
				c.columns[i], c.hasCol[i], found = tg, true, true
			} else if tg, ok := c.keys[strings.ToLower(name)]; ok {
				c.columns[i], c.hasCol[i], found = tg, true, true
			}
		}
		if !found {
			c.columns = nil
			return fmt.Errorf("csv: header row names no known field (see --field)")
		}
		return errSkip
	}
	if len(fields) != len(c.columns) {
		return fmt.Errorf("csv: %d fields, header has %d", len(fields), len(c.columns))
	}
	for i, v := range fields {
		if c.hasCol[i] {
			if err := c.columns[i].set(rec, v); err != nil {
				return err
			}
		}
	}
	return nil
}
