// The API reference of /docs: Swagger UI over the daemon's own /openapi.json, every asset
// served by yued itself (no CDN, and no call to the public validator).
window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#docs",
  validatorUrl: null,
  deepLinking: true,
  docExpansion: "list",
});
