package tfprovider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// The API omits empty strings, lists and maps. What it answers is written
// back over what the configuration had (prior), keeping the configuration's
// spelling of "nothing": null stays null and "" or [] or {} stays as it was,
// so that an apply never reports a change the user did not make.

// stringValue is v, or prior when both mean nothing.
func stringValue(prior types.String, v string) types.String {
	switch {
	case v != "":
		return types.StringValue(v)
	case prior.IsUnknown():
		return types.StringNull()
	case prior.ValueString() == "":
		return prior // null or ""
	}
	return types.StringValue("")
}

// listValue is v as a list of strings, or prior when both are empty.
func listValue(ctx context.Context, prior types.List, v []string) (types.List, diag.Diagnostics) {
	if len(v) == 0 {
		if !prior.IsNull() && !prior.IsUnknown() && len(prior.Elements()) == 0 {
			return prior, nil
		}
		return types.ListNull(types.StringType), nil
	}
	return types.ListValueFrom(ctx, types.StringType, v)
}

// mapValue is v as a map of strings, or prior when both are empty.
func mapValue(ctx context.Context, prior types.Map, v map[string]string) (types.Map, diag.Diagnostics) {
	if len(v) == 0 {
		if !prior.IsNull() && !prior.IsUnknown() && len(prior.Elements()) == 0 {
			return prior, nil
		}
		return types.MapNull(types.StringType), nil
	}
	return types.MapValueFrom(ctx, types.StringType, v)
}

// setCount counts the values that are set (known and not empty); unknown
// is true when one is not known yet, so a check must wait for apply.
func setCount(vs ...types.String) (n int, unknown bool) {
	for _, v := range vs {
		switch {
		case v.IsUnknown():
			unknown = true
		case !v.IsNull() && v.ValueString() != "":
			n++
		}
	}
	return n, unknown
}
