package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

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

// writeRecord writes one struct (a view of the core, such as
// sidecar.Status) field by field, by its JSON names, so that a field the
// core adds shows in every format without a change here: json is the
// struct itself; table is aligned "name: value" lines (a name's
// underscores read as spaces; an omitempty field left out when empty),
// then one table per field that is a list of structs; csv is
// "field,value" rows, a list's items flattened as field.N.subfield.
func writeRecord(w io.Writer, v any, format string) error {
	if format == fmtJSON {
		return writeJSON(w, v)
	}
	fields, err := recordFields(v)
	if err != nil {
		return err
	}
	if format == fmtCSV {
		cw := csv.NewWriter(w)
		cw.Write([]string{"field", "value"})
		for _, f := range fields {
			if f.list == nil {
				cw.Write([]string{f.name, f.value})
				continue
			}
			for i, item := range f.list.rows {
				for j, c := range item {
					cw.Write([]string{fmt.Sprintf("%s.%d.%s", f.name, i, strings.ToLower(f.list.header[j])), c})
				}
			}
		}
		cw.Flush()
		return cw.Error()
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, f := range fields {
		if f.list == nil {
			fmt.Fprintf(tw, "%s:\t%s\n", strings.ReplaceAll(f.name, "_", " "), f.value)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, f := range fields {
		if f.list != nil && len(f.list.rows) > 0 {
			fmt.Fprintln(w)
			if err := f.list.write(w, fmtTable); err != nil {
				return err
			}
		}
	}
	return nil
}

// recordField is one field of a record: a value, or a list of structs.
type recordField struct {
	name, value string
	list        *table
}

// recordFields reads a struct's exported fields by their JSON names (the
// JSON encoding is the contract: a field JSON leaves out is left out).
func recordFields(v any) ([]recordField, error) {
	rv := reflect.Indirect(reflect.ValueOf(v))
	if rv.Kind() != reflect.Struct {
		return nil, fmt.Errorf("record: %T is not a struct", v)
	}
	var out []recordField
	for i := range rv.NumField() {
		sf := rv.Type().Field(i)
		name, omit, ok := jsonName(sf)
		if !ok {
			continue
		}
		fv := rv.Field(i)
		if omit && fv.IsZero() {
			continue
		}
		if fv.Kind() == reflect.Slice && reflect.Indirect(reflect.New(fv.Type().Elem())).Kind() == reflect.Struct {
			t := &table{}
			for j := range fv.Len() {
				item, err := recordFields(fv.Index(j).Interface())
				if err != nil {
					return nil, err
				}
				if t.header == nil {
					for _, f := range item {
						t.header = append(t.header, strings.ToUpper(f.name))
					}
				}
				row := make([]any, len(item))
				for k, f := range item {
					row[k] = f.value
				}
				t.add(row...)
			}
			out = append(out, recordField{name: name, list: t})
			continue
		}
		out = append(out, recordField{name: name, value: cellText(fv)})
	}
	return out, nil
}

// jsonName is a field's JSON name and omitempty; ok is false for a field
// JSON leaves out.
func jsonName(sf reflect.StructField) (name string, omitempty, ok bool) {
	if !sf.IsExported() {
		return "", false, false
	}
	tag := sf.Tag.Get("json")
	if tag == "-" {
		return "", false, false
	}
	name, opts, _ := strings.Cut(tag, ",")
	if name == "" {
		name = strings.ToLower(sf.Name)
	}
	return name, strings.Contains(","+opts+",", ",omitempty,"), true
}

// cellText formats one value: times in RFC 3339 (UTC), lists of values
// space-separated, anything else as fmt prints it.
func cellText(v reflect.Value) string {
	switch x := v.Interface().(type) {
	case time.Time:
		if x.IsZero() {
			return ""
		}
		return x.UTC().Format(time.RFC3339)
	case time.Duration:
		return x.String()
	case fmt.Stringer:
		return x.String()
	}
	if v.Kind() == reflect.Slice {
		parts := make([]string, v.Len())
		for i := range v.Len() {
			parts[i] = cellText(v.Index(i))
		}
		return strings.Join(parts, " ")
	}
	if v.Kind() == reflect.Float64 || v.Kind() == reflect.Float32 {
		return strconv.FormatFloat(v.Float(), 'g', 6, 64)
	}
	return fmt.Sprint(v.Interface())
}
