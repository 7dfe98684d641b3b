//! Numbered pages of the admin listings (orders, dead letters, audit): page 1 is the newest,
//! a page number that cannot be a page is refused before any query runs, and a listing
//! fetches one row more than a page to know whether another page exists without counting.
//! And the filter the short listings (reconciliation runs, rehearsals, baselines) take
//! instead of pages.

/// A checked page request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageWindow {
    pub page: i64,
    pub per_page: i64,
    /// Rows skipped before this page.
    pub offset: i64,
}

impl PageWindow {
    /// Page `page` (1-based) of `per_page` rows; refused (with what to tell the caller) for a
    /// page below 1 or one so far out that the offset would overflow.
    pub fn new(page: i64, per_page: i64) -> Result<Self, String> {
        page.checked_sub(1)
            .filter(|skipped| *skipped >= 0)
            .and_then(|skipped| skipped.checked_mul(per_page))
            .map(|offset| Self {
                page,
                per_page,
                offset,
            })
            .ok_or_else(|| format!("page must be 1 or more, not {page}"))
    }

    /// Rows to fetch: one more than a page.
    pub fn fetch_limit(&self) -> i64 {
        self.per_page + 1
    }

    /// The page's rows out of what was fetched, and whether another page follows.
    pub fn split<T>(&self, mut fetched: Vec<T>) -> (Vec<T>, bool) {
        let per_page = usize::try_from(self.per_page).unwrap_or(usize::MAX);
        let has_more = fetched.len() > per_page;
        fetched.truncate(per_page);
        (fetched, has_more)
    }
}

/// `?activity_id=`: only this activity's rows, else every activity's. An extractor of its
/// own, so a listing's handler takes the filter and a bad query is refused as every bad
/// query is.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ByActivity {
    /// Only this activity's rows.
    #[serde(default)]
    pub activity_id: Option<i64>,
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for ByActivity {
    type Rejection = crate::error::ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        let axum::extract::Query(filter) =
            axum::extract::Query::<ByActivity>::from_request_parts(parts, state).await?;
        Ok(filter)
    }
}

impl crate::route_table::DescribesRequest for ByActivity {
    fn describe(shape: &mut crate::route_table::RequestShape) {
        use utoipa::IntoParams;
        shape.query = Self::into_params(|| Some(utoipa::openapi::path::ParameterIn::Query));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_start_at_one_and_never_overflow() {
        assert_eq!(PageWindow::new(1, 50).map(|w| w.offset), Ok(0));
        assert_eq!(PageWindow::new(3, 50).map(|w| w.offset), Ok(100));
        for bad in [0, -1, i64::MIN, i64::MAX] {
            assert!(PageWindow::new(bad, 50).is_err(), "page {bad}");
        }
    }

    #[test]
    fn one_row_more_than_a_page_means_another_page() {
        let window = PageWindow::new(1, 2).expect("page");
        assert_eq!(window.fetch_limit(), 3);
        assert_eq!(window.split(vec![1, 2, 3]), (vec![1, 2], true));
        assert_eq!(window.split(vec![1, 2]), (vec![1, 2], false));
    }
}
