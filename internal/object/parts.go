package object

// PartRun is a run of Count consecutive parts of Size bytes each: how a
// multipart upload cut its object, kept so that GET and HEAD can serve one
// part by its number. Uploads cut in parts of one size but the last take
// one or two runs.
type PartRun struct {
	Size  int64 `json:"size"`
	Count int   `json:"count"`
}

// MaxPartRuns bounds the runs an object keeps with its metadata; an object
// cut more irregularly keeps none and is served as one part.
const MaxPartRuns = 8

// PartRuns returns the runs of the part sizes in upload order, or nil if
// they take more than MaxPartRuns.
func PartRuns(sizes []int64) []PartRun {
	var runs []PartRun
	for _, s := range sizes {
		if n := len(runs); n > 0 && runs[n-1].Size == s {
			runs[n-1].Count++
			continue
		}
		if len(runs) == MaxPartRuns {
			return nil
		}
		runs = append(runs, PartRun{Size: s, Count: 1})
	}
	return runs
}

// ValidParts reports whether runs describe an object of size bytes: whole
// runs of parts that add up to it, at most MaxPartNumber of them.
func ValidParts(runs []PartRun, size int64) bool {
	if len(runs) == 0 || len(runs) > MaxPartRuns {
		return false
	}
	var total int64
	count := 0
	for _, r := range runs {
		if r.Count <= 0 || r.Size < 0 || r.Count > MaxPartNumber {
			return false
		}
		count += r.Count
		if count > MaxPartNumber || r.Size > 0 && int64(r.Count) > (size-total)/r.Size {
			return false
		}
		total += r.Size * int64(r.Count)
	}
	return total == size
}

// Part returns the offset and length of part n (from 1) of the object i
// describes, and how many parts it has. An object without parts is one
// part. ok is false if it has no part n.
func (i Info) Part(n int) (offset, length int64, count int, ok bool) {
	if len(i.Parts) == 0 {
		return 0, i.Size, 1, n == 1
	}
	for _, r := range i.Parts {
		count += r.Count
	}
	if n < 1 || n > count {
		return 0, 0, count, false
	}
	k := n - 1
	for _, r := range i.Parts {
		if k < r.Count {
			return offset + int64(k)*r.Size, r.Size, count, true
		}
		offset += int64(r.Count) * r.Size
		k -= r.Count
	}
	return 0, 0, count, false
}
