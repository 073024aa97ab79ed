"""What people read: text, Markdown and HTML renderings of the typed results the library
returns. Views word and lay out; they compute nothing the JSON output would not carry."""
