package controller

// AppliedRecords is how many objects r remembers having applied (applyChanged).
func AppliedRecords(r *GatewayReconciler) int {
	n := 0
	r.applied.Range(func(any, any) bool { n++; return true })
	return n
}
