package demo

import "testing"

func BenchmarkGenerate(b *testing.B) {
	for b.Loop() {
		generate(rowCount)
	}
}

func BenchmarkQuery(b *testing.B) {
	d := data()
	cases := []struct {
		name string
		st   gridState
	}{
		{"all by id", gridState{Column: "id"}},
		{"all by name", gridState{Column: "name"}},
		{"all by amount desc", gridState{Column: "amount", Dir: "desc"}},
		{"text by date", gridState{Text: "an", Column: "date"}},
		{"status and min by city", gridState{Status: "refunded", MinAmount: 100, Column: "city"}},
	}
	for _, c := range cases {
		q := c.st.query()
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				d.run(q)
			}
		})
	}
}
