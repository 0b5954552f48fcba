// Package english owns how rlctl's messages count things: "1 rule", "3 rules", "2 mismatches".
package english

import (
	"strconv"
	"strings"
)

// Plural returns n and noun, in the plural unless n is 1 or -1: "1 rule", "0 rules", "-1 day".
// A noun ending in s, x, z, ch or sh takes "es" ("2 mismatches"), any other "s". Give it a
// noun whose plural follows those rules, as rlctl's all do.
func Plural[N ~int | ~int32 | ~int64](n N, noun string) string {
	s := strconv.FormatInt(int64(n), 10) + " " + noun
	switch {
	case n == 1 || n == -1:
		return s
	case strings.HasSuffix(noun, "s"), strings.HasSuffix(noun, "x"), strings.HasSuffix(noun, "z"),
		strings.HasSuffix(noun, "ch"), strings.HasSuffix(noun, "sh"):
		return s + "es"
	}
	return s + "s"
}
