"""Testing helpers for corenn and its plugins (the op-conformance kit lives in corenn.testing.opcheck)."""
