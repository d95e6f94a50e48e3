"""Utilities: data loading (``corenn.utils.data``) and removable hook handles (``corenn.utils.hooks``)."""
