package accesslog

import (
	"encoding/csv"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// csvState reads CSV with a header row naming the columns; columns map onto fields like JSON
// keys do. Each line is parsed on its own, so a record may not span lines.
type csvState struct {
	keys    map[string]target
	columns []target // from the header row; a reader's parsers share them, read only
	hasCol  []bool
	ranks   fieldRanks // the current line's (target.set)
}

func splitCSV(line string) ([]string, error) {
	r := csv.NewReader(strings.NewReader(line))
	r.FieldsPerRecord = -1
	r.LazyQuotes = true
	fields, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("csv: %w", err)
	}
	return fields, nil
}

// header reads the header row: a column maps onto a field under its own name or in lower case.
// Every column m maps must be present, and one must hold the timestamp; header returns its
// name, quoted.
func (c *csvState) header(line string, m Mapping) (string, error) {
	fields, err := splitCSV(line)
	if err != nil {
		return "", fmt.Errorf("header row: %w", err)
	}
	c.columns = make([]target, len(fields))
	c.hasCol = make([]bool, len(fields))
	present := map[string]bool{}
	timeColumn := ""
	for i, name := range fields {
		name = strings.TrimSpace(strings.TrimPrefix(name, "\ufeff"))
		fields[i] = name
		key := name
		tg, ok := c.keys[key]
		if !ok {
			key = strings.ToLower(name)
			tg, ok = c.keys[key]
		}
		if !ok {
			continue
		}
		c.columns[i], c.hasCol[i] = tg, true
		present[key] = true
		if tg.f == fieldTime && timeColumn == "" {
			timeColumn = strconv.Quote(name)
		}
	}
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !present[m[name]] {
			return "", fmt.Errorf("--field %s=%s: no column %q in the header row (columns: %s)",
				name, m[name], m[name], strings.Join(fields, ", "))
		}
	}
	if timeColumn == "" {
		return "", fmt.Errorf("no timestamp column in the header row: want %s, or map one with --field start_time=COLUMN (columns: %s)",
			timeKeys(nil), strings.Join(fields, ", "))
	}
	return timeColumn, nil
}

func (c *csvState) parse(line string, rec *Record) error {
	fields, err := splitCSV(line)
	if err != nil {
		return err
	}
	if len(fields) != len(c.columns) {
		return fmt.Errorf("csv: %d fields, header has %d", len(fields), len(c.columns))
	}
	c.ranks.reset()
	for i, v := range fields {
		if c.hasCol[i] {
			if err := c.columns[i].set(rec, v, &c.ranks); err != nil {
				return err
			}
		}
	}
	return nil
}
