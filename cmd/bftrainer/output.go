package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/BurntSushi/toml"
)

// table is rows of text written as aligned columns, JSON objects or CSV.
type table struct {
	header []string
	rows   [][]string
}

func (t *table) add(cells ...any) {
	row := make([]string, len(cells))
	for i, c := range cells {
		row[i] = fmt.Sprint(c)
	}
	t.rows = append(t.rows, row)
}

func (t *table) write(w io.Writer, format string) error {
	switch format {
	case "", "table":
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, strings.Join(t.header, "\t"))
		for _, r := range t.rows {
			fmt.Fprintln(tw, strings.Join(r, "\t"))
		}
		return tw.Flush()
	case "csv":
		cw := csv.NewWriter(w)
		cw.Write(t.header)
		cw.WriteAll(t.rows)
		return cw.Error()
	case "json":
		out := make([]map[string]string, len(t.rows))
		for i, r := range t.rows {
			m := make(map[string]string, len(r))
			for j, c := range r {
				m[strings.ToLower(t.header[j])] = c
			}
			out[i] = m
		}
		return writeJSON(w, out)
	}
	return usagef("unknown format %q (want table, json or csv)", format)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func writeTOML(w io.Writer, v any) error {
	return toml.NewEncoder(w).Encode(v)
}
