//! A router that remembers what it serves: every route goes in with its method, its path
//! template, what its handler's extractors say about the request (query parameters, JSON
//! body, path value types) and what its return type says about a successful answer (its
//! status and JSON body), so the OpenAPI document and the RBAC matrix are built from the
//! same list the router is, and neither can miss a route or drift from a handler.

use axum::{
    body::{Body, Bytes},
    extract::{
        rejection::{BytesRejection, JsonRejection, PathRejection, QueryRejection},
        ConnectInfo, Path, Query, Request, State,
    },
    handler::Handler,
    http::{HeaderMap, HeaderName, Method, StatusCode},
    routing::{self, MethodRouter},
    Json, Router,
};
use std::{future::Future, net::SocketAddr};
use utoipa::{
    openapi::{
        path::{Parameter, ParameterIn},
        KnownFormat, ObjectBuilder, RefOr, Schema, SchemaFormat, Type,
    },
    IntoParams, PartialSchema, ToSchema,
};

use crate::error::ApiError;

/// What a handler's extractors tell about its request, and its return type about its
/// answer, collected for the OpenAPI document.
#[derive(Default)]
pub struct RequestShape {
    /// The query parameters, from a `Query<T>` extractor.
    pub query: Vec<Parameter>,
    /// The name of the JSON body's schema, from a `Json<T>` extractor.
    pub body: Option<String>,
    /// The types of the path's parameters in template order, from a `Path<T>` extractor.
    pub path: Vec<RefOr<Schema>>,
    /// Every schema the request's or the answer's body refers to, by name.
    pub schemas: Vec<(String, RefOr<Schema>)>,
    /// The successful answer, when the handler's return type says what it is; a handler
    /// that builds its response by hand (a page, a stream, a redirect) leaves it unsaid.
    pub success: Option<Success>,
}

/// A successful answer as the document describes it.
pub struct Success {
    /// `200`, or `2XX` when the handler chooses the status as it runs (201, 202, 204).
    pub status: &'static str,
    /// The JSON body's schema, when there is a body.
    pub body: Option<RefOr<Schema>>,
}

/// An extractor's part of [`RequestShape`]; extractors that the document does not describe
/// (state, headers read by hand, the actor) add nothing.
pub trait DescribesRequest {
    fn describe(_shape: &mut RequestShape) {}
}

/// A handler's arguments as axum types them, `(marker, extractor, ...)`: each extractor
/// describes its part.
pub trait HandlerArguments {
    fn describe(shape: &mut RequestShape);
}

macro_rules! handler_arguments {
    ($($extractor:ident),*) => {
        impl<M, $($extractor: DescribesRequest),*> HandlerArguments for (M, $($extractor,)*) {
            fn describe(_shape: &mut RequestShape) {
                $($extractor::describe(_shape);)*
            }
        }
    };
}

handler_arguments!();
handler_arguments!(A);
handler_arguments!(A, B);
handler_arguments!(A, B, C);
handler_arguments!(A, B, C, D);
handler_arguments!(A, B, C, D, E);
handler_arguments!(A, B, C, D, E, F);

impl<S> DescribesRequest for State<S> {}
impl DescribesRequest for HeaderMap {}
impl DescribesRequest for ConnectInfo<SocketAddr> {}
impl DescribesRequest for crate::client_address::ClientAddress {}
// The document describes the credentials as the admin API's security schemes instead.
impl DescribesRequest for contract::Actor {}
impl DescribesRequest for Request {}
// Bodies read raw are parsed by the handler, which answers their errors itself.
impl DescribesRequest for Body {}
impl DescribesRequest for Result<Bytes, BytesRejection> {}

impl<T: IntoParams> DescribesRequest for Result<Query<T>, QueryRejection> {
    fn describe(shape: &mut RequestShape) {
        shape.query = T::into_params(|| Some(ParameterIn::Query));
    }
}

impl<T: ToSchema> DescribesRequest for Result<Json<T>, JsonRejection> {
    fn describe(shape: &mut RequestShape) {
        shape.body = Some(T::name().into_owned());
        shape.schemas.push((T::name().into_owned(), T::schema()));
        T::schemas(&mut shape.schemas);
    }
}

/// The types of a path's parameters, in the order the template names them.
pub trait PathValues {
    fn schemas() -> Vec<RefOr<Schema>>;
}

impl PathValues for i64 {
    fn schemas() -> Vec<RefOr<Schema>> {
        vec![i64::schema()]
    }
}

impl PathValues for String {
    fn schemas() -> Vec<RefOr<Schema>> {
        vec![String::schema()]
    }
}

impl PathValues for uuid::Uuid {
    fn schemas() -> Vec<RefOr<Schema>> {
        // utoipa describes a Uuid field of a derived schema, but not a Uuid on its own.
        vec![ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Uuid)))
            .into()]
    }
}

impl<A: PartialSchema, B: PartialSchema> PathValues for (A, B) {
    fn schemas() -> Vec<RefOr<Schema>> {
        vec![A::schema(), B::schema()]
    }
}

impl<T: PathValues> DescribesRequest for Path<T> {
    fn describe(shape: &mut RequestShape) {
        shape.path = T::schemas();
    }
}

impl<T: PathValues> DescribesRequest for Result<Path<T>, PathRejection> {
    fn describe(shape: &mut RequestShape) {
        shape.path = T::schemas();
    }
}

/// What a handler's return type tells about its successful answer.
pub trait DescribesAnswer {
    fn describe_answer(_shape: &mut RequestShape) {}
}

/// A JSON body: its schema is written in place, and the schemas it refers to are added.
fn json_body<T: ToSchema>(shape: &mut RequestShape) -> Option<RefOr<Schema>> {
    T::schemas(&mut shape.schemas);
    Some(T::schema())
}

impl<T: ToSchema> DescribesAnswer for Json<T> {
    fn describe_answer(shape: &mut RequestShape) {
        let body = json_body::<T>(shape);
        shape.success = Some(Success {
            status: "200",
            body,
        });
    }
}

impl<T: ToSchema> DescribesAnswer for (StatusCode, Json<T>) {
    fn describe_answer(shape: &mut RequestShape) {
        let body = json_body::<T>(shape);
        shape.success = Some(Success {
            status: "2XX",
            body,
        });
    }
}

// Headers beside the body (a read's `Cache-Control`) change nothing the document says.
impl<T: ToSchema, const N: usize> DescribesAnswer for ([(HeaderName, &'static str); N], Json<T>) {
    fn describe_answer(shape: &mut RequestShape) {
        Json::<T>::describe_answer(shape);
    }
}

impl DescribesAnswer for StatusCode {
    fn describe_answer(shape: &mut RequestShape) {
        shape.success = Some(Success {
            status: "2XX",
            body: None,
        });
    }
}

impl DescribesAnswer for () {
    fn describe_answer(shape: &mut RequestShape) {
        shape.success = Some(Success {
            status: "200",
            body: None,
        });
    }
}

// A stream of server-sent events: its events are described in docs/, not as a JSON body.
impl<S> DescribesAnswer for axum::response::Sse<S> {}

impl<S, const N: usize> DescribesAnswer
    for ([(HeaderName, &'static str); N], axum::response::Sse<S>)
{
}

impl<T: DescribesAnswer> DescribesAnswer for Result<T, ApiError> {
    fn describe_answer(shape: &mut RequestShape) {
        T::describe_answer(shape);
    }
}

/// A handler as axum types it (its arguments `(marker, extractor, ...)`): its output
/// describes its answer.
pub trait HandlerAnswer<T> {
    fn describe_answer(shape: &mut RequestShape);
}

macro_rules! handler_answer {
    ($($extractor:ident),*) => {
        impl<F, Fut, M, $($extractor),*> HandlerAnswer<(M, $($extractor,)*)> for F
        where
            F: FnOnce($($extractor),*) -> Fut,
            Fut: Future,
            Fut::Output: DescribesAnswer,
        {
            fn describe_answer(shape: &mut RequestShape) {
                <Fut::Output as DescribesAnswer>::describe_answer(shape);
            }
        }
    };
}

handler_answer!();
handler_answer!(A);
handler_answer!(A, B);
handler_answer!(A, B, C);
handler_answer!(A, B, C, D);
handler_answer!(A, B, C, D, E);
handler_answer!(A, B, C, D, E, F2);

/// Everything a route's handler tells the document.
fn describe_route<H: HandlerAnswer<T>, T: HandlerArguments>(shape: &mut RequestShape) {
    T::describe(shape);
    H::describe_answer(shape);
}

/// A route's one numeric `{id}`, refused as every bad path value is.
pub struct Id(pub i64);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Id {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        let Path(id) = Path::<i64>::from_request_parts(parts, state).await?;
        Ok(Id(id))
    }
}

// An extractor of ours whose refusal the handler answers after its own checks.
impl<T: DescribesRequest> DescribesRequest for Result<T, ApiError> {
    fn describe(shape: &mut RequestShape) {
        T::describe(shape);
    }
}

impl DescribesRequest for Id {
    fn describe(shape: &mut RequestShape) {
        shape.path = <i64 as PathValues>::schemas();
    }
}

/// One route as the table lists it.
pub struct Listed {
    pub method: Method,
    pub path: &'static str,
    /// Fills in what the handler's extractors say about the request.
    pub describe: fn(&mut RequestShape),
}

/// Routes being assembled: the router and every route's entry.
pub struct RouteTable<S> {
    router: Router<S>,
    listed: Vec<Listed>,
}

impl<S: Clone + Send + Sync + 'static> Default for RouteTable<S> {
    fn default() -> Self {
        Self {
            router: Router::new(),
            listed: Vec::new(),
        }
    }
}

impl<S: Clone + Send + Sync + 'static> RouteTable<S> {
    pub fn get<H: Handler<T, S> + HandlerAnswer<T>, T: HandlerArguments + 'static>(
        self,
        path: &'static str,
        handler: H,
    ) -> Self {
        self.add::<H, T>(Method::GET, path, routing::get(handler))
    }

    pub fn post<H: Handler<T, S> + HandlerAnswer<T>, T: HandlerArguments + 'static>(
        self,
        path: &'static str,
        handler: H,
    ) -> Self {
        self.add::<H, T>(Method::POST, path, routing::post(handler))
    }

    pub fn put<H: Handler<T, S> + HandlerAnswer<T>, T: HandlerArguments + 'static>(
        self,
        path: &'static str,
        handler: H,
    ) -> Self {
        self.add::<H, T>(Method::PUT, path, routing::put(handler))
    }

    pub fn delete<H: Handler<T, S> + HandlerAnswer<T>, T: HandlerArguments + 'static>(
        self,
        path: &'static str,
        handler: H,
    ) -> Self {
        self.add::<H, T>(Method::DELETE, path, routing::delete(handler))
    }

    fn add<H: HandlerAnswer<T>, T: HandlerArguments>(
        mut self,
        method: Method,
        path: &'static str,
        route: MethodRouter<S>,
    ) -> Self {
        // axum merges method routers registered under the same path.
        self.router = self.router.route(path, route);
        self.listed.push(Listed {
            method,
            path,
            describe: describe_route::<H, T>,
        });
        self
    }

    /// Every route, in the order they were added.
    pub fn listed(&self) -> &[Listed] {
        &self.listed
    }

    /// The router, answering an unknown path or a method a path does not take with the
    /// API's JSON error body rather than axum's empty 404 and 405.
    pub fn into_router(self) -> Router<S> {
        self.router
            .fallback(|| async { ApiError::NotFound("route") })
            .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
    }
}
