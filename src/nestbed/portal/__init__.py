"""The web portal of ``nestbed serve``: plain server-rendered pages (Jinja2) over the same
accounts, projects and life cycle as the API, with htmx for actions and Cytoscape.js for
topologies (both vendored under ``static/vendor`` with their licences; no build step).

    session   the login cookie (an API token, HttpOnly, SameSite=Strict) and CSRF tokens
    forms     form bodies (urlencoded and multipart) read with the standard library
    graph     an experiment's IR as Cytoscape elements and a table of nodes (pure)
    derived   what the pages derive from a definition, computed once per IR and kept
    reports   a run's whole report as HTML, rendered once per report.md and kept on disk
    pages     the routes: experiments, create, topology, live, results, login
    mount     ``mount(app)``: the portal's routes, static files and HTML error pages

Every page reads without JavaScript; scripts only add the graph, live updates and htmx's
in-place swaps.
"""

from nestbed.portal.mount import mount

__all__ = ["mount"]
