-- A small company: departments, employees with their managers, projects and who works on them.

CREATE TABLE departments (
    dept_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    location TEXT NOT NULL,
    budget INTEGER NOT NULL
);

CREATE TABLE employees (
    emp_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    dept_id INTEGER NOT NULL REFERENCES departments (dept_id),
    manager_id INTEGER REFERENCES employees (emp_id),
    job_title TEXT NOT NULL,
    hire_year INTEGER NOT NULL,
    salary INTEGER NOT NULL
);

CREATE TABLE projects (
    project_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    dept_id INTEGER NOT NULL REFERENCES departments (dept_id),
    start_year INTEGER NOT NULL,
    status TEXT NOT NULL
);

CREATE TABLE assignments (
    emp_id INTEGER NOT NULL REFERENCES employees (emp_id),
    project_id INTEGER NOT NULL REFERENCES projects (project_id),
    hours_per_week INTEGER NOT NULL,
    PRIMARY KEY (emp_id, project_id)
);

INSERT INTO departments (dept_id, name, location, budget) VALUES
    (1, 'Engineering', 'Berlin', 1200000),
    (2, 'Sales', 'Lisbon', 650000),
    (3, 'Marketing', 'Lisbon', 420000),
    (4, 'Finance', 'Berlin', 380000),
    (5, 'Support', 'Dublin', 300000),
    (6, 'Research', 'Dublin', 540000),
    (7, 'Legal', 'Vienna', 150000);

INSERT INTO employees (emp_id, name, dept_id, manager_id, job_title, hire_year, salary) VALUES
    (1, 'Helena Vogt', 1, NULL, 'Director', 2012, 142000),
    (2, 'Marco Bianchi', 2, NULL, 'Director', 2014, 128000),
    (3, 'Sofia Lopes', 3, NULL, 'Director', 2016, 118000),
    (4, 'Arjun Rao', 4, NULL, 'Director', 2013, 125000),
    (5, 'Niamh Byrne', 5, NULL, 'Director', 2017, 104000),
    (6, 'Pieter de Vries', 6, NULL, 'Director', 2015, 131000),
    (7, 'Lukas Brandt', 1, 1, 'Engineer', 2018, 86000),
    (8, 'Mei Chen', 1, 1, 'Senior Engineer', 2016, 98000),
    (9, 'Tomasz Nowak', 1, 8, 'Engineer', 2020, 79000),
    (10, 'Ana Ferreira', 1, 8, 'Engineer', 2021, 76000),
    (11, 'Jonas Keller', 1, 8, 'Junior Engineer', 2023, 58000),
    (12, 'Leila Haddad', 1, 1, 'Senior Engineer', 2017, 101000),
    (13, 'Oskar Berg', 1, 12, 'Engineer', 2019, 83000),
    (14, 'Rita Santos', 2, 2, 'Account Manager', 2018, 72000),
    (15, 'Diego Alves', 2, 2, 'Account Manager', 2020, 69000),
    (16, 'Ines Moura', 2, 14, 'Sales Associate', 2022, 52000),
    (17, 'Carlos Pinto', 2, 14, 'Sales Associate', 2023, 49000),
    (18, 'Beatriz Costa', 2, 15, 'Sales Associate', 2021, 51000),
    (19, 'Joana Reis', 3, 3, 'Marketing Lead', 2019, 74000),
    (20, 'Miguel Rocha', 3, 19, 'Designer', 2021, 61000),
    (21, 'Clara Nunes', 3, 19, 'Copywriter', 2022, 56000),
    (22, 'Tiago Gomes', 3, 19, 'Designer', 2023, 58000),
    (23, 'Greta Schmidt', 4, 4, 'Accountant', 2015, 71000),
    (24, 'Felix Wagner', 4, 4, 'Analyst', 2019, 67000),
    (25, 'Paul Richter', 4, 23, 'Accountant', 2022, 60000),
    (26, 'Aoife Walsh', 5, 5, 'Support Lead', 2018, 62000),
    (27, 'Sean Murphy', 5, 26, 'Support Agent', 2020, 44000),
    (28, 'Ciara Kelly', 5, 26, 'Support Agent', 2021, 43000),
    (29, 'Declan Ryan', 5, 26, 'Support Agent', 2023, 41000),
    (30, 'Roisin Doyle', 5, 26, 'Support Agent', 2024, 40000),
    (31, 'Eoin Byrne', 6, 6, 'Research Scientist', 2017, 96000),
    (32, 'Fatima Zahra', 6, 6, 'Research Scientist', 2019, 92000),
    (33, 'Yuki Tanaka', 6, 31, 'Research Engineer', 2021, 84000),
    (34, 'Liam Carter', 6, 31, 'Research Engineer', 2022, 81000),
    (35, 'Nora Lindahl', 6, 32, 'Intern', 2024, 32000),
    (36, 'Samir Patel', 1, 12, 'Intern', 2024, 34000);

INSERT INTO projects (project_id, name, dept_id, start_year, status) VALUES
    (1, 'Atlas Platform', 1, 2021, 'active'),
    (2, 'Billing Rewrite', 1, 2022, 'active'),
    (3, 'Mobile App', 1, 2019, 'completed'),
    (4, 'Nordic Expansion', 2, 2023, 'active'),
    (5, 'Partner Portal', 2, 2020, 'completed'),
    (6, 'Brand Refresh', 3, 2024, 'active'),
    (7, 'Annual Audit', 4, 2024, 'active'),
    (8, 'Helpdesk Migration', 5, 2022, 'paused'),
    (9, 'Protein Folding Study', 6, 2021, 'active'),
    (10, 'Quantum Sensors', 6, 2023, 'paused');

-- Each employee below the directors works on the home department's first project, and some
-- also on a second one chosen by fixed arithmetic.
WITH home AS (
    SELECT e.emp_id, e.dept_id, MIN(p.project_id) AS project_id
    FROM employees AS e JOIN projects AS p ON p.dept_id = e.dept_id
    WHERE e.manager_id IS NOT NULL
    GROUP BY e.emp_id
),
extra AS (
    SELECT emp_id, ((emp_id * 7) % 10) + 1 AS project_id
    FROM employees
    WHERE manager_id IS NOT NULL AND emp_id % 3 <> 0
)
INSERT INTO assignments (emp_id, project_id, hours_per_week)
SELECT emp_id, project_id, 8 + (emp_id * project_id * 5) % 25
FROM (SELECT emp_id, project_id FROM home UNION SELECT emp_id, project_id FROM extra)
ORDER BY emp_id, project_id;
