//! `GET /api/openapi.json`: the OpenAPI document of the buyer API (`/api`) and the admin API
//! (`/admin/api`), built from the same route tables the routers are, so a route cannot be
//! served without being documented. Every operation has its path parameters, query
//! parameters and JSON body as the handler's extractors type them, its successful answer
//! as the handler's return type does, its security scheme and the `{code, message}` error
//! body every failure answers with.

use axum::{http::Method, response::IntoResponse, Json};
use std::sync::LazyLock;
use utoipa::{
    openapi::{
        path::{HttpMethod, OperationBuilder, ParameterBuilder, ParameterIn},
        request_body::RequestBodyBuilder,
        security::{
            ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme,
        },
        ComponentsBuilder, ContentBuilder, InfoBuilder, ObjectBuilder, OpenApi, OpenApiBuilder,
        Paths, Ref, RefOr, Required, ResponseBuilder, Schema, Type,
    },
    PartialSchema, ToSchema,
};

use base::{
    error::ErrorBody,
    route_table::{Listed, RequestShape, RouteTable, Success},
};
use ops::state::AppState;

const BUYER_PREFIX: &str = "/api";
/// The success of an operation whose answer is not a JSON body (an event stream), whose
/// page in docs/ describes it.
pub const BY_HAND: &str = "the operation succeeded; its answer is not JSON (see its docs/ page)";
const ADMIN_PREFIX: &str = "/admin/api";

/// The buyer API's routes, served under [`BUYER_PREFIX`].
pub(crate) fn buyer_routes() -> RouteTable<AppState> {
    let routes = sale::buy::routes::routes(RouteTable::default());
    let routes = sale::orders::buyer::routes(routes);
    let routes = sale::lottery::routes::buyer(routes);
    let routes = sale::events::routes::routes(routes);
    sale::payment::routes::routes(routes)
}

/// Every buyer route as (method, path template under `/api`).
pub fn buyer_listed() -> Vec<(Method, &'static str)> {
    buyer_routes()
        .listed()
        .iter()
        .map(|route| (route.method.clone(), route.path))
        .collect()
}

/// Who may call an operation, as the security schemes of the document name it.
#[derive(Clone, Copy)]
enum Caller {
    /// Anyone: activity info and live status.
    Public,
    /// A buyer with a bearer JWT.
    Buyer,
    /// The payment center, proving itself with a signature of the body.
    PaymentCenter,
    /// A staff member: a bearer API token or the console's session cookie.
    Staff,
}

fn buyer_caller(path: &str) -> Caller {
    match path {
        "/activities/{id}" | "/activities/{id}/status" => Caller::Public,
        "/pay/notify" => Caller::PaymentCenter,
        _ => Caller::Buyer,
    }
}

fn security(caller: Caller) -> Vec<SecurityRequirement> {
    let scheme = |name: &str| SecurityRequirement::new(name, Vec::<String>::new());
    match caller {
        Caller::Public => Vec::new(),
        Caller::Buyer => vec![scheme("buyer_jwt")],
        Caller::PaymentCenter => vec![scheme("payment_signature")],
        // Either one suffices: two requirements, not one with both.
        Caller::Staff => vec![scheme("admin_token"), scheme("admin_session")],
    }
}

fn http_method(method: &Method) -> HttpMethod {
    match *method {
        Method::GET => HttpMethod::Get,
        Method::POST => HttpMethod::Post,
        Method::PUT => HttpMethod::Put,
        Method::DELETE => HttpMethod::Delete,
        Method::PATCH => HttpMethod::Patch,
        _ => unreachable!("the route tables add only GET, POST, PUT and DELETE"),
    }
}

/// An axum path template as OpenAPI writes it: a catch-all `{*rest}` is a plain `{rest}`
/// parameter (clients percent-encode the slashes in it).
fn openapi_path(prefix: &str, template: &str) -> (String, Vec<String>) {
    let mut names = Vec::new();
    let path = template
        .split('/')
        .map(
            |segment| match segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                Some(name) => {
                    let name = name.trim_start_matches('*');
                    names.push(name.to_owned());
                    format!("{{{name}}}")
                }
                None => segment.to_owned(),
            },
        )
        .collect::<Vec<_>>()
        .join("/");
    (format!("{prefix}{path}"), names)
}

fn operation_id(method: &Method, path: &str) -> String {
    let words: Vec<&str> = path
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|word| !word.is_empty())
        .collect();
    format!("{}_{}", method.as_str().to_lowercase(), words.join("_"))
}

fn add_operations(
    paths: &mut Paths,
    schemas: &mut Vec<(String, RefOr<Schema>)>,
    prefix: &str,
    tag: &str,
    routes: &[Listed],
    caller: impl Fn(&str) -> Caller,
) {
    let error = || {
        ContentBuilder::new()
            .schema(Some(Ref::from_schema_name(ErrorBody::name())))
            .build()
    };
    for route in routes {
        let mut shape = RequestShape::default();
        (route.describe)(&mut shape);
        let (path, names) = openapi_path(prefix, route.path);
        let success = match shape.success {
            Some(Success { status, body }) => {
                let answer = ResponseBuilder::new().description("the operation succeeded");
                let answer = match body {
                    Some(schema) => answer.content(
                        "application/json",
                        ContentBuilder::new().schema(Some(schema)).build(),
                    ),
                    None => answer,
                };
                (status, answer)
            }
            // Built by hand (a stream): only its success is promised here.
            None => ("2XX", ResponseBuilder::new().description(BY_HAND)),
        };
        let mut operation = OperationBuilder::new()
            .operation_id(Some(operation_id(&route.method, &path)))
            .tag(tag)
            .securities(Some(security(caller(route.path))))
            .response(success.0, success.1)
            .response(
                "4XX",
                ResponseBuilder::new()
                    .description("the request was refused; `code` says why")
                    .content("application/json", error()),
            )
            .response(
                "5XX",
                ResponseBuilder::new()
                    .description("a dependency failed; `code` says which kind of failure")
                    .content("application/json", error()),
            );
        // A handler that reads its path by hand (none does today) leaves the values strings.
        let mut types = shape.path.into_iter();
        for name in names {
            let schema = types
                .next()
                .unwrap_or_else(|| ObjectBuilder::new().schema_type(Type::String).into());
            operation = operation.parameter(
                ParameterBuilder::new()
                    .name(name)
                    .parameter_in(ParameterIn::Path)
                    .required(Required::True)
                    .schema(Some(schema)),
            );
        }
        operation = operation.parameters(Some(shape.query));
        if let Some(body) = shape.body {
            operation = operation.request_body(Some(
                RequestBodyBuilder::new()
                    .content(
                        "application/json",
                        ContentBuilder::new()
                            .schema(Some(Ref::from_schema_name(body)))
                            .build(),
                    )
                    .required(Some(Required::True))
                    .build(),
            ));
        }
        schemas.extend(shape.schemas);
        paths.add_path_operation(path, vec![http_method(&route.method)], operation);
    }
}

fn document() -> OpenApi {
    let mut paths = Paths::new();
    let mut schemas = vec![(ErrorBody::name().into_owned(), ErrorBody::schema())];
    add_operations(
        &mut paths,
        &mut schemas,
        BUYER_PREFIX,
        "buyer",
        buyer_routes().listed(),
        buyer_caller,
    );
    add_operations(
        &mut paths,
        &mut schemas,
        ADMIN_PREFIX,
        "admin",
        ops::admin::routes::table().listed(),
        |_| Caller::Staff,
    );
    let components = ComponentsBuilder::new()
        .schemas_from_iter(schemas)
        .security_scheme(
            "buyer_jwt",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .build(),
            ),
        )
        .security_scheme(
            "admin_token",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        )
        .security_scheme(
            "admin_session",
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::new(contract::SESSION_COOKIE))),
        )
        .security_scheme(
            "payment_signature",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new(
                sale::payment::signature::HEADER,
            ))),
        )
        .build();
    OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("seckill")
                .version(env!("CARGO_PKG_VERSION"))
                .build(),
        )
        .paths(paths)
        .components(Some(components))
        .build()
}

// Built once: the route tables do not change while the process runs.
static DOCUMENT: LazyLock<OpenApi> = LazyLock::new(document);

pub(crate) async fn serve() -> impl IntoResponse {
    Json(&*DOCUMENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_templates_become_openapi_paths() {
        assert_eq!(
            openapi_path("/admin/api", "/switches/{*path}"),
            (
                "/admin/api/switches/{path}".to_owned(),
                vec!["path".to_owned()]
            )
        );
        assert_eq!(
            openapi_path("/api", "/orders/{id}/pay"),
            ("/api/orders/{id}/pay".to_owned(), vec!["id".to_owned()])
        );
        assert_eq!(
            operation_id(&Method::POST, "/api/orders/{id}/pay"),
            "post_api_orders_id_pay"
        );
    }
}
