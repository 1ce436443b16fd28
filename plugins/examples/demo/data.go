package demo

import (
	"slices"
	"strings"
	"sync"
	"time"
)

// rowCount is the size of the order table every worker generates.
const rowCount = 600_000

// Statuses an order can be in, in the order a page lists them.
var statuses = []string{"pending", "paid", "shipped", "delivered", "refunded"}

var (
	firstNames = []string{
		"Ada", "Alan", "Amara", "Anders", "Aiko", "Bianca", "Boris", "Camille",
		"Carlos", "Chen", "Dara", "Diego", "Elena", "Emeka", "Farah", "Felix",
		"Greta", "Hana", "Hugo", "Ines", "Ivan", "Jamal", "Jonas", "Kavya",
		"Kenji", "Lars", "Leila", "Luca", "Maya", "Mateo", "Nadia", "Nils",
		"Noor", "Olga", "Omar", "Paolo", "Priya", "Quinn", "Rafael", "Rosa",
		"Sami", "Sofia", "Tariq", "Thea", "Tomas", "Uma", "Viktor", "Wen",
		"Xavier", "Yara", "Yusuf", "Zara", "Zoltan", "Aino", "Bruno", "Cleo",
		"Dmitri", "Esther", "Fatima", "Gustav", "Helga", "Idris", "Jade", "Kofi",
	}
	lastNames = []string{
		"Abbott", "Bauer", "Castillo", "Dubois", "Eriksson", "Fischer", "Garcia", "Haddad",
		"Ivanova", "Jensen", "Kowalski", "Lindqvist", "Moreau", "Nakamura", "Okafor", "Petrov",
		"Quispe", "Rossi", "Silva", "Tanaka", "Ueda", "Varga", "Weber", "Xu",
		"Yilmaz", "Zhang", "Almeida", "Becker", "Costa", "Dimitrov", "Esposito", "Ferreira",
		"Gallo", "Horvat", "Ibrahim", "Janssen", "Kim", "Lopez", "Mendes", "Novak",
		"Olsen", "Park", "Ricci", "Santos", "Torres", "Uchida", "Vogel", "Wagner",
		"Young", "Zimmermann", "Arslan", "Brennan", "Chowdhury", "Delgado", "Engel", "Fontaine",
		"Grant", "Holm", "Iqbal", "Jovanovic", "Keller", "Lambert", "Murphy", "Nilsen",
	}
	cities = []string{
		"Amsterdam", "Athens", "Barcelona", "Berlin", "Bogota", "Boston", "Brussels", "Buenos Aires",
		"Cairo", "Cape Town", "Chicago", "Copenhagen", "Delhi", "Dublin", "Helsinki", "Istanbul",
		"Jakarta", "Lagos", "Lima", "Lisbon", "London", "Lyon", "Madrid", "Manila",
		"Melbourne", "Mexico City", "Milan", "Montreal", "Mumbai", "Nairobi", "Osaka", "Oslo",
		"Paris", "Prague", "Rome", "Santiago", "Seoul", "Singapore", "Stockholm", "Toronto",
	}
	products = []string{
		"Anvil", "Backpack", "Bicycle", "Blender", "Bookcase", "Camera", "Desk Lamp", "Drone",
		"Espresso Machine", "Headphones", "Hiking Boots", "Kettle", "Keyboard", "Laptop Stand", "Monitor", "Notebook",
		"Office Chair", "Printer", "Router", "Scooter", "Smartwatch", "Speaker", "Tent", "Umbrella",
	}
)

// epoch is the date of day 0; days spans the order dates.
var epoch = time.Date(2021, time.January, 1, 0, 0, 0, 0, time.UTC)

const days = 5 * 365

// dataset is the order table, column by column (struct of arrays): about 11
// bytes a row. Row i has order id i+1, and ids grow with the date, as an
// order table's do. It is read-only once built, so any number of pages read
// it at once.
type dataset struct {
	name    []uint16 // index into names
	city    []uint8  // index into cities
	product []uint8  // index into products
	status  []uint8  // index into statuses
	cents   []int32  // amount in cents, 1.00 to 4,991.00
	day     []uint16 // days since epoch

	maxCents int32 // the largest amount

	names []string // every first and last name pair

	// Ranks give each dictionary entry its place in byte-wise string order,
	// so that sorting on a text column sorts small integers.
	nameRank, cityRank, productRank, statusRank []uint32
	// Lower-case dictionaries, for the free-text filter.
	namesLower, citiesLower, productsLower []string

	// sorted is the engine's precomputed sort orders (engine.go), when the
	// table came from an engine image; nil sorts at query time.
	sorted *sortOrders
}

var (
	theDataOnce sync.Once
	theData     *dataset
)

// data returns the process's order table, built on first use.
func data() *dataset {
	theDataOnce.Do(func() { theData = generate(rowCount) })
	return theData
}

// generate builds n rows deterministically: the same n gives the same rows in
// every process, so a page's tree means the same thing on every worker.
func generate(n int) *dataset {
	d := &dataset{
		name:    make([]uint16, n),
		city:    make([]uint8, n),
		product: make([]uint8, n),
		status:  make([]uint8, n),
		cents:   make([]int32, n),
		day:     make([]uint16, n),
	}
	d.fillDictionaries()

	r := splitmix(0x5eed_57_1c_6d)
	for i := range n {
		d.name[i] = uint16(r.next() % uint64(len(d.names)))
		// Cities and products are skewed: a few are far more common.
		d.city[i] = uint8(skewed(r.next(), len(cities)))
		d.product[i] = uint8(skewed(r.next(), len(products)))
		// Amounts are mostly small, with a long tail.
		a, b := r.next()%1000, r.next()%1000
		d.cents[i] = int32(100 + a*b/2)
		d.maxCents = max(d.maxCents, d.cents[i])
		day := i*days/n + int(r.next()%7) - 3
		d.day[i] = uint16(min(max(day, 0), days-1))
		d.status[i] = pickStatus(r.next(), day)
	}
	return d
}

// fillDictionaries sets the dictionaries, which depend on no row.
func (d *dataset) fillDictionaries() {
	for _, f := range firstNames {
		for _, l := range lastNames {
			d.names = append(d.names, f+" "+l)
		}
	}
	d.nameRank, d.namesLower = dictionary(d.names)
	d.cityRank, d.citiesLower = dictionary(cities)
	d.productRank, d.productsLower = dictionary(products)
	d.statusRank, _ = dictionary(statuses)
}

// pickStatus makes recent orders more often pending or paid, and old ones
// delivered.
func pickStatus(x uint64, day int) uint8 {
	p := x % 100
	if day > days-30 {
		switch {
		case p < 40:
			return 0 // pending
		case p < 70:
			return 1 // paid
		case p < 95:
			return 2 // shipped
		}
		return 3 // delivered
	}
	switch {
	case p < 2:
		return 0
	case p < 5:
		return 1
	case p < 8:
		return 2
	case p < 94:
		return 3
	}
	return 4 // refunded
}

// skewed maps x to [0, n), the first values more likely than the last.
func skewed(x uint64, n int) int {
	a, b := int(x%uint64(n)), int((x>>32)%uint64(n))
	return min(a, b)
}

// dictionary returns each entry's rank in sorted order and its lower case.
func dictionary(words []string) (rank []uint32, lower []string) {
	sorted := slices.Clone(words)
	slices.Sort(sorted)
	rank = make([]uint32, len(words))
	lower = make([]string, len(words))
	for i, w := range words {
		j, _ := slices.BinarySearch(sorted, w)
		rank[i] = uint32(j)
		lower[i] = strings.ToLower(w)
	}
	return rank, lower
}

// len is the number of rows.
func (d *dataset) len() int { return len(d.cents) }

// date is row i's order date.
func (d *dataset) date(i int) string {
	return epoch.AddDate(0, 0, int(d.day[i])).Format(time.DateOnly)
}

// row returns row i as a tree value: an object of JSON-like values.
func (d *dataset) row(i int) map[string]any {
	return map[string]any{
		"id":      float64(i + 1),
		"name":    d.names[d.name[i]],
		"city":    cities[d.city[i]],
		"product": products[d.product[i]],
		"status":  statuses[d.status[i]],
		"amount":  float64(d.cents[i]) / 100,
		"date":    d.date(i),
	}
}

// splitmix is a small, fast generator whose sequence is fixed forever, unlike
// a library's that may change between releases.
type splitmix uint64

func (s *splitmix) next() uint64 {
	*s += 0x9e3779b97f4a7c15
	z := uint64(*s)
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
