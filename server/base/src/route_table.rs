//! A router that remembers what it serves: every route goes in with its method, its path
//! template and what its handler's extractors say about the request (query parameters,
//! JSON body, path value types), so the OpenAPI document and the RBAC matrix are built from
//! the same list the router is, and neither can miss a route or drift from a handler.

use axum::{
    body::{Body, Bytes},
    extract::{
        rejection::{BytesRejection, JsonRejection, PathRejection, QueryRejection},
        ConnectInfo, Path, Query, Request, State,
    },
    handler::Handler,
    http::{HeaderMap, Method},
    routing::{self, MethodRouter},
    Json, Router,
};
use std::net::SocketAddr;
use utoipa::{
    openapi::{
        path::{Parameter, ParameterIn},
        KnownFormat, ObjectBuilder, RefOr, Schema, SchemaFormat, Type,
    },
    IntoParams, PartialSchema, ToSchema,
};

use crate::error::ApiError;

/// What a handler's extractors tell about its request, collected for the OpenAPI document.
#[derive(Default)]
pub struct RequestShape {
    /// The query parameters, from a `Query<T>` extractor.
    pub query: Vec<Parameter>,
    /// The name of the JSON body's schema, from a `Json<T>` extractor.
    pub body: Option<String>,
    /// The types of the path's parameters in template order, from a `Path<T>` extractor.
    pub path: Vec<RefOr<Schema>>,
    /// Every schema the body refers to, by name.
    pub schemas: Vec<(String, RefOr<Schema>)>,
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
    pub fn get<H: Handler<T, S>, T: HandlerArguments + 'static>(
        self,
        path: &'static str,
        handler: H,
    ) -> Self {
        self.add::<T>(Method::GET, path, routing::get(handler))
    }

    pub fn post<H: Handler<T, S>, T: HandlerArguments + 'static>(
        self,
        path: &'static str,
        handler: H,
    ) -> Self {
        self.add::<T>(Method::POST, path, routing::post(handler))
    }

    pub fn put<H: Handler<T, S>, T: HandlerArguments + 'static>(
        self,
        path: &'static str,
        handler: H,
    ) -> Self {
        self.add::<T>(Method::PUT, path, routing::put(handler))
    }

    pub fn delete<H: Handler<T, S>, T: HandlerArguments + 'static>(
        self,
        path: &'static str,
        handler: H,
    ) -> Self {
        self.add::<T>(Method::DELETE, path, routing::delete(handler))
    }

    fn add<T: HandlerArguments>(
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
            describe: T::describe,
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
