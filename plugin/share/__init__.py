"""Sharing without a server (SPEC §4.5): ``stepscope report`` (one self-contained HTML
file) and ``stepscope summary`` (terminal tables), from the server's own payloads."""
