package finding

import (
	"encoding/json"
	"io"
	"net/url"
	"path/filepath"
)

// SARIF writes a SARIF 2.1.0 log with one run, whose tool is rlctl; GitHub code scanning and
// other tools read it. The driver lists the report's rules; each result names its rule by ID and
// index, and locates the finding by file URI (relative, with '/') and start line and column.
type SARIF struct{}

// SARIFSchema is the $schema of the logs SARIF writes.
const SARIFSchema = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"

type sarifLog struct {
	Schema  string     `json:"$schema"`
	Version string     `json:"version"`
	Runs    []sarifRun `json:"runs"`
}

type sarifRun struct {
	Tool    sarifTool     `json:"tool"`
	Results []sarifResult `json:"results"`
}

type sarifTool struct {
	Driver sarifDriver `json:"driver"`
}

type sarifDriver struct {
	Name           string      `json:"name"`
	InformationURI string      `json:"informationUri,omitempty"`
	Rules          []sarifRule `json:"rules"`
}

type sarifRule struct {
	ID                   string       `json:"id"`
	Name                 string       `json:"name,omitempty"`
	ShortDescription     sarifMessage `json:"shortDescription"`
	FullDescription      sarifMessage `json:"fullDescription"`
	HelpURI              string       `json:"helpUri,omitempty"`
	DefaultConfiguration struct {
		Level string `json:"level"`
	} `json:"defaultConfiguration"`
}

type sarifMessage struct {
	Text string `json:"text"`
}

type sarifResult struct {
	RuleID    string          `json:"ruleId"`
	RuleIndex *int            `json:"ruleIndex,omitempty"`
	Level     string          `json:"level"`
	Message   sarifMessage    `json:"message"`
	Locations []sarifLocation `json:"locations,omitempty"`
}

type sarifLocation struct {
	PhysicalLocation sarifPhysical `json:"physicalLocation"`
}

type sarifPhysical struct {
	ArtifactLocation struct {
		URI string `json:"uri"`
	} `json:"artifactLocation"`
	Region *sarifRegion `json:"region,omitempty"`
}

type sarifRegion struct {
	StartLine   int `json:"startLine"`
	StartColumn int `json:"startColumn,omitempty"`
}

// Write implements Format.
func (SARIF) Write(w io.Writer, r *Report) error {
	driver := sarifDriver{Name: "rlctl", InformationURI: "https://github.com/rlctl/rlctl", Rules: []sarifRule{}}
	index := map[string]int{}
	for i, rule := range r.Rules {
		sr := sarifRule{
			ID: rule.ID, Name: rule.Name,
			ShortDescription: sarifMessage{rule.Summary},
			FullDescription:  sarifMessage{rule.Summary},
			HelpURI:          rule.HelpURI,
		}
		if rule.Help != "" {
			sr.FullDescription = sarifMessage{rule.Help}
		}
		sr.DefaultConfiguration.Level = sarifLevel(rule.Severity)
		driver.Rules = append(driver.Rules, sr)
		index[rule.ID] = i
	}
	results := make([]sarifResult, 0, len(r.Findings))
	for _, f := range r.Findings {
		res := sarifResult{RuleID: f.ID, Level: sarifLevel(f.Severity), Message: sarifMessage{f.Message}}
		if i, ok := index[f.ID]; ok {
			res.RuleIndex = &i
		}
		if f.Pos.File != "" {
			var loc sarifLocation
			loc.PhysicalLocation.ArtifactLocation.URI = fileURI(f.Pos.File)
			if f.Pos.Line > 0 {
				loc.PhysicalLocation.Region = &sarifRegion{StartLine: f.Pos.Line, StartColumn: f.Pos.Col}
			}
			res.Locations = []sarifLocation{loc}
		}
		results = append(results, res)
	}
	log := sarifLog{
		Schema:  SARIFSchema,
		Version: "2.1.0",
		Runs:    []sarifRun{{Tool: sarifTool{Driver: driver}, Results: results}},
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(log)
}

func sarifLevel(s Severity) string {
	if s == Error {
		return "error"
	}
	return "warning"
}

// fileURI turns a file path into a SARIF artifact URI: a relative reference with '/' separators
// and percent-encoding, or a file:// URI for an absolute path.
func fileURI(path string) string {
	p := filepath.ToSlash(path)
	if filepath.IsAbs(path) {
		return (&url.URL{Scheme: "file", Path: p}).String()
	}
	return (&url.URL{Path: p}).String()
}
