//! The WebUI at `/`: the bundle built from `clients/web` (`scripts/build-webui.sh`, Vite)
//! is committed under `clients/web/dist` and compiled into the binary, so `cargo build`
//! alone serves a working page with every asset local (no CDN, no npm at run time).
use actix_web::http::header;
use actix_web::{web, HttpResponse};

const INDEX: &[u8] = include_bytes!("../../clients/web/dist/index.html");
const APP_JS: &[u8] = include_bytes!("../../clients/web/dist/assets/app.js");
const APP_CSS: &[u8] = include_bytes!("../../clients/web/dist/assets/index.css");
const DOCS_INDEX: &[u8] = include_bytes!("../../clients/web/dist/docs/index.html");
const DOCS_JS: &[u8] = include_bytes!("../../clients/web/dist/docs/docs.js");
const SWAGGER_JS: &[u8] = include_bytes!("../../clients/web/dist/docs/swagger-ui-bundle.js");
const SWAGGER_CSS: &[u8] = include_bytes!("../../clients/web/dist/docs/swagger-ui.css");

/// A page or asset of the UI: never framed by another site (clickjacking), never read as
/// another type than its own.
fn asset(body: &'static [u8], content_type: &str, cache: &str) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(content_type)
        .insert_header((header::CACHE_CONTROL, cache.to_string()))
        .insert_header((header::X_FRAME_OPTIONS, "DENY"))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header(("content-security-policy", "frame-ancestors 'none'"))
        .body(body)
}

pub async fn index() -> HttpResponse {
    asset(INDEX, "text/html; charset=utf-8", "no-cache")
}

pub async fn assets(name: web::Path<String>) -> HttpResponse {
    // The names are fixed by the Vite config; a rebuild changes the binary, so `no-cache`
    // with revalidation keeps a browser from mixing two builds.
    match name.as_str() {
        "app.js" => asset(APP_JS, "text/javascript; charset=utf-8", "no-cache"),
        "index.css" => asset(APP_CSS, "text/css; charset=utf-8", "no-cache"),
        _ => crate::reply::error(actix_web::http::StatusCode::NOT_FOUND, format!("no asset {name}")),
    }
}

/// `/docs`: the API reference, Swagger UI over `/openapi.json`, its assets compiled in.
pub async fn docs() -> HttpResponse {
    asset(DOCS_INDEX, "text/html; charset=utf-8", "no-cache")
}

pub async fn docs_assets(name: web::Path<String>) -> HttpResponse {
    match name.as_str() {
        "docs.js" => asset(DOCS_JS, "text/javascript; charset=utf-8", "no-cache"),
        "swagger-ui-bundle.js" => asset(SWAGGER_JS, "text/javascript; charset=utf-8", "no-cache"),
        "swagger-ui.css" => asset(SWAGGER_CSS, "text/css; charset=utf-8", "no-cache"),
        _ => crate::reply::error(actix_web::http::StatusCode::NOT_FOUND, format!("no asset {name}")),
    }
}
