package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// writeRecord writes one struct — a view of the core, such as
// sidecar.Status — field by field, by the fields' JSON names, so that a
// field the core adds shows in every format without a change here:
//
//   - table: aligned "name: value" lines (a name's underscores read as
//     spaces, a nested struct's fields as "outer inner", a list of
//     strings as a line per item, none when empty), then one table per
//     list of structs;
//   - csv: "field,value" rows (a nested field as outer.inner, a list's
//     items as field.N.subfield, a list of strings' as field.N);
//   - json: the fields in their order, as encoding/json writes them,
//     except that an error is its message (null when nil) and a zero time
//     is null.
//
// A field JSON leaves out ("-", unexported) is left out; an omitempty
// field is left out when it is zero.
func writeRecord(w io.Writer, v any, format string) error {
	rv := reflect.ValueOf(v)
	if format == fmtJSON {
		b, err := json.MarshalIndent(jsonValue(rv), "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	fields, err := recordFields(rv, nil)
	if err != nil {
		return err
	}
	if format == fmtCSV {
		cw := csv.NewWriter(w)
		cw.Write([]string{"field", "value"})
		for _, f := range fields {
			if f.lines != nil {
				for i, l := range *f.lines {
					cw.Write([]string{fmt.Sprintf("%s.%d", strings.Join(f.path, "."), i), l})
				}
				continue
			}
			if f.list == nil {
				cw.Write([]string{strings.Join(f.path, "."), f.value})
				continue
			}
			for i, row := range f.list.rows {
				for j, c := range row {
					cw.Write([]string{fmt.Sprintf("%s.%d.%s", strings.Join(f.path, "."), i, strings.ToLower(f.list.header[j])), c})
				}
			}
		}
		cw.Flush()
		return cw.Error()
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, f := range fields {
		name := strings.ReplaceAll(strings.Join(f.path, " "), "_", " ")
		switch {
		case f.lines != nil:
			for _, l := range *f.lines {
				fmt.Fprintf(tw, "%s:\t%s\n", name, l)
			}
		case f.list == nil:
			fmt.Fprintf(tw, "%s:\t%s\n", name, f.value)
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
	path  []string // JSON names from the record down
	value string
	list  *table
	lines *[]string // a list of strings: a line (a row) each, none when empty
}

// leaf reports whether v is written as one value, not walked into.
func leaf(t reflect.Type) bool {
	return t == reflect.TypeFor[time.Time]() || t.Implements(reflect.TypeFor[error]()) || t.Implements(reflect.TypeFor[fmt.Stringer]())
}

// recordFields walks a struct's fields by their JSON names.
func recordFields(rv reflect.Value, path []string) ([]recordField, error) {
	for rv.Kind() == reflect.Pointer || rv.Kind() == reflect.Interface {
		if rv.IsNil() {
			return nil, nil
		}
		rv = rv.Elem()
	}
	if rv.Kind() != reflect.Struct {
		return nil, fmt.Errorf("record: %s is not a struct", rv.Type())
	}
	var out []recordField
	for i := range rv.NumField() {
		name, omit, ok := jsonName(rv.Type().Field(i))
		fv := rv.Field(i)
		if !ok || omit && fv.IsZero() {
			continue
		}
		p := append(append([]string{}, path...), name)
		ft := fv.Type()
		for ft.Kind() == reflect.Pointer && !leaf(ft) {
			ft = ft.Elem()
		}
		switch {
		case leaf(fv.Type()):
			out = append(out, recordField{path: p, value: cellText(fv)})
		case ft.Kind() == reflect.Struct && !leaf(ft):
			sub, err := recordFields(fv, p)
			if err != nil {
				return nil, err
			}
			out = append(out, sub...)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.String:
			lines := make([]string, fv.Len())
			for j := range lines {
				lines[j] = fv.Index(j).String()
			}
			out = append(out, recordField{path: p, lines: &lines})
		case ft.Kind() == reflect.Slice && structElem(ft.Elem()):
			t, err := listTable(fv)
			if err != nil {
				return nil, err
			}
			out = append(out, recordField{path: p, list: t})
		default:
			out = append(out, recordField{path: p, value: cellText(fv)})
		}
	}
	return out, nil
}

// structElem reports whether a list's items are records themselves.
func structElem(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct && !leaf(t)
}

// listTable lays a list of structs out as a table, a column per field.
func listTable(fv reflect.Value) (*table, error) {
	t := &table{}
	for j := range fv.Len() {
		item, err := recordFields(fv.Index(j), nil)
		if err != nil {
			return nil, err
		}
		if t.header == nil {
			for _, f := range item {
				t.header = append(t.header, strings.ToUpper(strings.Join(f.path, "_")))
			}
		}
		row := make([]any, len(item))
		for k, f := range item {
			row[k] = f.value
		}
		t.add(row...)
	}
	return t, nil
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

// cellText formats one value: times in RFC 3339 (UTC, "" when zero),
// errors as their message, lists of values space-separated, anything else
// as fmt prints it.
func cellText(v reflect.Value) string {
	if (v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface) && v.IsNil() {
		return ""
	}
	switch x := v.Interface().(type) {
	case time.Time:
		if x.IsZero() {
			return ""
		}
		return x.UTC().Format(time.RFC3339)
	case error:
		return x.Error()
	case fmt.Stringer:
		return x.String()
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		return cellText(v.Elem())
	case reflect.Slice, reflect.Array:
		parts := make([]string, v.Len())
		for i := range v.Len() {
			parts[i] = cellText(v.Index(i))
		}
		return strings.Join(parts, " ")
	case reflect.Float32, reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', 6, 64)
	}
	return fmt.Sprint(v.Interface())
}

// orderedObject is a JSON object that keeps its fields' order.
type orderedObject []struct {
	key   string
	value any
}

func (o orderedObject) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, kv := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(kv.key)
		v, err := json.Marshal(kv.value)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// jsonValue is what writeRecord's json writes for v.
func jsonValue(v reflect.Value) any {
	if !v.IsValid() {
		return nil
	}
	if (v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface) && v.IsNil() {
		return nil
	}
	switch x := v.Interface().(type) {
	case time.Time:
		if x.IsZero() {
			return nil
		}
		return x.UTC().Format(time.RFC3339Nano)
	case error:
		return x.Error()
	case json.Marshaler:
		return x
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		return jsonValue(v.Elem())
	case reflect.Struct:
		var o orderedObject
		for i := range v.NumField() {
			name, omit, ok := jsonName(v.Type().Field(i))
			if !ok || omit && v.Field(i).IsZero() {
				continue
			}
			o = append(o, struct {
				key   string
				value any
			}{name, jsonValue(v.Field(i))})
		}
		return o
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Uint8 {
			return v.Interface() // []byte: base64, as encoding/json
		}
		out := make([]any, v.Len())
		for i := range v.Len() {
			out[i] = jsonValue(v.Index(i))
		}
		return out
	}
	return v.Interface()
}
