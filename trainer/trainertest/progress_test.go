package trainertest

import (
	"testing"
	"time"
)

func TestParseUnix(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     time.Time
		bad      bool
	}{
		{name: "nanoseconds", in: "1800000000.123456789", want: time.Unix(1800000000, 123456789)},
		{name: "milliseconds", in: "1800000000.5", want: time.Unix(1800000000, 500000000)},
		{name: "whole", in: "1800000000", want: time.Unix(1800000000, 0)},
		{name: "garbage", in: "x.1", bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseUnix(tc.in)
			if tc.bad {
				if err == nil {
					t.Fatalf("ParseUnix(%q) = %v, want an error", tc.in, got)
				}
				return
			}
			if err != nil || !got.Equal(tc.want) {
				t.Fatalf("ParseUnix(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}
