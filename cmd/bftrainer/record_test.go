package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// recordView has the shapes a core view takes: numbers, strings, a time,
// an error, a nested struct, a pointer, a list of values and a list of
// records, an omitempty field and a field JSON leaves out.
type recordView struct {
	Idle     int          `json:"idle"`
	Database string       `json:"database"`
	Last     time.Time    `json:"last_round"`
	Writable error        `json:"writable"`
	Journal  recordNested `json:"journal"`
	Maybe    *recordNested
	Stale    []string     `json:"stale"`
	Trainers []recordItem `json:"trainers"`
	Note     string       `json:"note,omitempty"`
	Secret   string       `json:"-"`
	hidden   int
}

type recordNested struct {
	Records int   `json:"records"`
	Err     error `json:"err"`
}

type recordItem struct {
	ID    string  `json:"trainer"`
	Nodes int     `json:"nodes"`
	Rate  float64 `json:"rate"`
}

// TestWriteRecord: every exported field of a view reaches every format
// by its JSON name, whatever its shape — the contract that lets the core
// add fields to its status without a change to the CLI.
func TestWriteRecord(t *testing.T) {
	v := recordView{Idle: 4, Database: "/x/b.db", Last: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Writable: errors.New("read-only file system"), Journal: recordNested{Records: 3, Err: nil},
		Stale: []string{"a", "b"}, Trainers: []recordItem{{"t1", 2, 1.5}, {"t2", 0, 0}}, Secret: "s", hidden: 1}
	render := func(format string) string {
		var b bytes.Buffer
		if err := writeRecord(&b, v, format); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	table := render(fmtTable)
	for _, want := range []string{"idle:", "last round:  ", "2026-01-02T03:04:05Z", "writable:", "read-only file system",
		"journal records:", "journal err:", "stale:            a\n", "stale:            b\n", "TRAINER  NODES  RATE", "t1       2      1.5"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	csvOut := render(fmtCSV)
	for _, want := range []string{"field,value\n", "idle,4\n", "last_round,2026-01-02T03:04:05Z\n", "writable,read-only file system\n",
		"journal.records,3\n", "journal.err,\n", "stale.0,a\n", "stale.1,b\n", "trainers.1.trainer,t2\n", "trainers.0.rate,1.5\n"} {
		if !strings.Contains(csvOut, want) {
			t.Errorf("csv lacks %q:\n%s", want, csvOut)
		}
	}
	for _, out := range []string{table, csvOut} {
		if strings.Contains(out, "note") || strings.Contains(out, "secret") || strings.Contains(out, "hidden") || strings.Contains(out, "maybe") {
			t.Errorf("a field JSON leaves out, or an empty omitempty or nil pointer, was written:\n%s", out)
		}
	}
	var got map[string]any
	js := render(fmtJSON)
	if err := json.Unmarshal([]byte(js), &got); err != nil {
		t.Fatalf("json: %v\n%s", err, js)
	}
	if got["writable"] != "read-only file system" || got["last_round"] != "2026-01-02T03:04:05Z" || got["idle"] != 4.0 ||
		got["journal"].(map[string]any)["err"] != nil || len(got["trainers"].([]any)) != 2 || got["maybe"] != nil {
		t.Errorf("json: %s", js)
	}
	if _, ok := got["note"]; ok {
		t.Errorf("json has the empty omitempty field: %s", js)
	}
	if i := strings.Index(js, `"idle"`); i < 0 || i > strings.Index(js, `"database"`) {
		t.Errorf("json does not keep the fields' order: %s", js)
	}
}
