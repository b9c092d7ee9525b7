// Command selector-oracle parses selectors with k8s.io/apimachinery itself, for the differential
// test of insights' own parsers (tests/unit/test_insights_selectors_oracle.py).
//
// Input, one JSON object a line: {"kind": "label"|"field", "selector": "..."}.
// Output, one JSON object a line, written as soon as its input line is read (the test keeps one
// process and talks to it in batches): {"error": "..."} when the selector does not parse, else
// {"requirements": [[key, operator, [values...]], ...], "name": ..., "pinned": bool} where name
// and pinned are what RequiresExactMatch("metadata.name") gives for a field selector.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
)

type query struct {
	Kind     string `json:"kind"`
	Selector string `json:"selector"`
}

type answer struct {
	Error        *string `json:"error,omitempty"`
	Requirements [][]any `json:"requirements"`
	Name         string  `json:"name"`
	Pinned       bool    `json:"pinned"`
}

func failed(err error) answer {
	msg := err.Error()
	return answer{Error: &msg}
}

func parse(q query) answer {
	reqs := [][]any{}
	switch q.Kind {
	case "label":
		selector, err := labels.Parse(q.Selector)
		if err != nil {
			return failed(err)
		}
		requirements, _ := selector.Requirements()
		for _, r := range requirements {
			reqs = append(reqs, []any{r.Key(), string(r.Operator()), r.Values().List()})
		}
		return answer{Requirements: reqs}
	case "field":
		selector, err := fields.ParseSelector(q.Selector)
		if err != nil {
			return failed(err)
		}
		for _, r := range selector.Requirements() {
			reqs = append(reqs, []any{r.Field, string(r.Operator), []string{r.Value}})
		}
		name, pinned := selector.RequiresExactMatch("metadata.name")
		return answer{Requirements: reqs, Name: name, Pinned: pinned}
	default:
		return failed(fmt.Errorf("unknown kind %q", q.Kind))
	}
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 16<<20)
	encoder := json.NewEncoder(os.Stdout)
	encoder.SetEscapeHTML(false)
	for in.Scan() {
		var q query
		if err := json.Unmarshal(in.Bytes(), &q); err != nil {
			fmt.Fprintf(os.Stderr, "selector-oracle: bad input line: %v\n", err)
			os.Exit(2)
		}
		if err := encoder.Encode(parse(q)); err != nil {
			fmt.Fprintf(os.Stderr, "selector-oracle: %v\n", err)
			os.Exit(2)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "selector-oracle: %v\n", err)
		os.Exit(2)
	}
}
