"""The panel's webhook pages: views, forms and the endpoint-health chart."""
